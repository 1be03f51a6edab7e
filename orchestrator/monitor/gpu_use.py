"""GPU use per task, as every reader sees it: each task's GPUs' use and its own memory there, and the
`on CPU?` judgement. Pure functions of what the reducer keeps (views.TaskTrack, HostView) and a clock.

Where the figures come from: each host's supervisor reads its GPUs (NVML or nvidia-smi: one reading per
host per second, training/telemetry/gpu_use.py) and writes them in its facts file with, per task, the MiB
its own processes (the task's pid and its descendants, by the run's environment markers) hold on each GPU
index; the agent's `host_sample` and `status`'s read of the host carry them here (events.TaskFacts.gpu_mem,
HostView.gpus).

`on CPU?`: a task planned on a GPU (its CUDA_VISIBLE_DEVICES not empty) whose processes hold no memory on
any GPU once it has been running for `settle_s` seconds, on a host whose GPUs were read. TensorFlow
that found no usable GPU (no CUDA libraries, a CPU-only wheel) runs on the CPU without a word: this says so.
"""

from __future__ import annotations

from orchestrator.monitor.events import GpuSample
from orchestrator.monitor.task_state import TaskGpu

GPU_SETTLE_S = 20.0  # TF's import and CUDA's start-up take seconds before the first allocation


def cuda_gpus(cuda_visible_devices: str) -> tuple[int, ...]:
    """The GPU indexes of a plan task's CUDA_VISIBLE_DEVICES ("0,1" -> (0, 1); "" -> (): the CPU)."""
    return tuple(int(d) for d in (x.strip() for x in cuda_visible_devices.split(",")) if d.isdigit())


def on_cpu_suspected(planned: tuple[int, ...], gpu_mem: dict[int, float | None] | None,
                     running_since: float | None, now: float, settle_s: float = GPU_SETTLE_S) -> bool:
    """Planned on a GPU, running for `settle_s` by `now`, its GPUs read, and nothing of it on any GPU."""
    if not planned or gpu_mem is None or running_since is None or now - running_since < settle_s:
        return False
    return not any(mb is None or mb > 0 for mb in gpu_mem.values())


def task_gpu_use(planned: tuple[int, ...], gpu_mem: dict[int, float | None] | None,
                 host_gpus: tuple[GpuSample, ...]) -> tuple[TaskGpu, ...]:
    """One TaskGpu per GPU the task is planned on or holds memory on, in index order."""
    if not planned and not gpu_mem:
        return ()
    by_index = {g.index: g for g in host_gpus}
    out = []
    for i in sorted(set(planned) | set(gpu_mem or ())):
        g = by_index.get(i)
        own = None if gpu_mem is None else gpu_mem.get(i, 0.0)
        out.append(TaskGpu(i, g.util_pct if g else None, g.mem_used_mb if g else None,
                           g.mem_total_mb if g else None, own))
    return tuple(out)
