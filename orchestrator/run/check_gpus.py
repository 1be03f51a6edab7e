"""`check`'s question about GPUs beyond `nvidia-smi`: does TensorFlow see the GPUs the plan gives a host?

Asked only for the built-in trainers (each of their tasks asks it again before it trains, and fails for
good when the answer is no: training/probes/gpu_check.py, training/task.py); a user's own program
(`[training] command`) may not be TensorFlow, and is not checked. The probe lists TensorFlow's GPUs under
the CUDA_VISIBLE_DEVICES of the host's GPU tasks together; a host where it sees fewer is not ready, with
the line a task would fail with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from orchestrator.plan.model import ClusterPlan, TaskPlan
from training.probes.gpu_check import gpu_problem


class GpuAnswer(Protocol):
    host: str
    tf_gpus_checked: str
    tf_gpus_seen: int | None
    tf_gpu_cause: str | None


def planned_gpu_indexes(tasks: Sequence[TaskPlan]) -> list[int]:
    """Every GPU the tasks are given, from their CUDA_VISIBLE_DEVICES."""
    return sorted({int(g) for t in tasks for g in t.cuda_visible_devices.split(",") if g.strip()})


def tf_gpu_check(plan: ClusterPlan, tasks: Sequence[TaskPlan]) -> tuple[str, str]:
    """(the CUDA_VISIBLE_DEVICES to list TensorFlow's GPUs under, who: `worker:0, worker:1`) for a host's
    built-in tasks with GPUs; ("", "") when it has none, or the plan runs the user's program."""
    gpu_tasks = [t for t in tasks if t.cuda_visible_devices.strip()]
    if plan.uses_user_command or not gpu_tasks:
        return "", ""
    return ",".join(map(str, planned_gpu_indexes(gpu_tasks))), ", ".join(f"{t.job}:{t.index}" for t in gpu_tasks)


def gpu_shortfall_problem(row: GpuAnswer, gpu_tasks: str) -> list[str]:
    """The host's problem line when TensorFlow saw fewer GPUs than planned (the probe gave the cause)."""
    if row.tf_gpu_cause is None or row.tf_gpus_seen is None:
        return []
    return [gpu_problem(f"{gpu_tasks} on {row.host}", row.tf_gpus_checked, row.tf_gpus_seen, row.tf_gpu_cause)]
