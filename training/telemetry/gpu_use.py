"""This host's GPUs and the processes using them, and which of the run's tasks those processes belong to.

One reading per host per sample, never per task: NVML (nvidia-ml-py, imported as `pynvml`) where it is
installed, else `nvidia-smi` run twice in a row, once per GPU and once per compute process (it answers one
query kind per call):

    nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw
               --format=csv,noheader,nounits
    nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits

A `GpuReading` holds the GPUs as JSON-ready dicts (`index`, `uuid`, `util_pct`, `mem_used_mb`,
`mem_total_mb`, `temp_c`, `power_w`: MiB, °C, W; None where the GPU does not say, "[N/A]") and the compute
processes as (pid, gpu uuid, MiB or None). `attribute` gives each task the memory its own processes hold on
each GPU index, matching pids with a `task_of(pid)` (TaskCpu.task_of: the run's environment markers, so a
`sh -c` command's real program, a child, counts for its task). `GpuSampler` reads on its own thread, so a
slow or hung nvidia-smi never holds up the supervisor that asks for the latest reading.

Known gaps: pids are those of the driver's namespace: in a container without the host's pid namespace no
process matches (`pids_visible`: then the tasks' memory is not known, rather than none); GPU indices are nvidia-smi's (PCI bus order), as CUDA_VISIBLE_DEVICES means them when
CUDA_DEVICE_ORDER=PCI_BUS_ID. Stdlib only (pynvml optional).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..run.layout import RUN_DIR_ENV
from .task_cpu import TASK_ID_ENV

GPU_FIELDS = "index,uuid,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw"
APP_FIELDS = "pid,gpu_uuid,used_memory"
GPU_QUERY = ["nvidia-smi", f"--query-gpu={GPU_FIELDS}", "--format=csv,noheader,nounits"]
APP_QUERY = ["nvidia-smi", f"--query-compute-apps={APP_FIELDS}", "--format=csv,noheader,nounits"]
QUERY_TIMEOUT_S = 5.0
MIB = 1024 * 1024


class GpuReading:
    """One reading of the host. A plain class, and subprocess, shutil and importlib imported only where a
    host is read: the supervisor imports this module at every start (RunLayout says what that costs)."""

    __slots__ = ("apps", "gpus", "t")

    def __init__(self, t: float, gpus: list[dict[str, Any]], apps: list[tuple[int, str, float | None]]) -> None:
        self.t = t  # time.time() when it was taken
        self.gpus = gpus
        self.apps = apps  # pid, gpu uuid, MiB


def _value(text: str) -> float | None:
    """A number, or None for what nvidia-smi prints when it has none ("[N/A]", "[Not Supported]")."""
    try:
        return float(text)
    except ValueError:
        return None


def parse_gpus(output: str) -> list[dict[str, Any]]:
    """The per-GPU query's lines (GPU_FIELDS, csv,noheader,nounits); lines of another shape are skipped."""
    gpus = []
    for line in output.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 7 or not parts[0].isdigit():
            continue
        util, used, total, temp, power = (_value(p) for p in parts[2:])
        gpus.append({"index": int(parts[0]), "uuid": parts[1], "util_pct": util, "mem_used_mb": used,
                     "mem_total_mb": total, "temp_c": temp, "power_w": power})
    return gpus


def parse_apps(output: str) -> list[tuple[int, str, float | None]]:
    """The compute-apps query's lines (APP_FIELDS): (pid, gpu uuid, MiB or None)."""
    apps = []
    for line in output.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit():
            apps.append((int(parts[0]), parts[1], _value(parts[2])))
    return apps


def _smi(argv: list[str]) -> str | None:
    import subprocess

    # Without the run's markers: nvidia-smi is no process of the run (`stop` and `status` count those)
    env = {k: v for k, v in os.environ.items() if k not in (RUN_DIR_ENV, TASK_ID_ENV)}
    try:
        res = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout if res.returncode == 0 else None


def read_smi(with_apps: bool = True) -> GpuReading | None:
    """One nvidia-smi reading (None: it is not there or failed)."""
    out = _smi(GPU_QUERY)
    if out is None:
        return None
    apps = _smi(APP_QUERY) if with_apps else ""
    return GpuReading(time.time(), parse_gpus(out), parse_apps(apps or ""))


def _nvml() -> Any:
    """pynvml, initialised; None when nvidia-ml-py is not installed or finds no driver."""
    import importlib

    try:
        nvml: Any = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:  # ImportError, or NVMLError (no driver): fall back to nvidia-smi
        return None
    return nvml


def _get(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported and kin: this field is unknown, the others stand
        return None


def read_nvml(nvml: Any) -> GpuReading | None:
    """One NVML reading: the same fields as nvidia-smi's (bytes and mW turned into MiB and W)."""
    count = _get(nvml.nvmlDeviceGetCount)
    if count is None:
        return None
    gpus: list[dict[str, Any]] = []
    apps: list[tuple[int, str, float | None]] = []
    for i in range(int(count)):
        h = _get(nvml.nvmlDeviceGetHandleByIndex, i)
        if h is None:
            continue
        uuid = _get(nvml.nvmlDeviceGetUUID, h)
        uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        util, mem = _get(nvml.nvmlDeviceGetUtilizationRates, h), _get(nvml.nvmlDeviceGetMemoryInfo, h)
        temp, power = _get(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU), _get(nvml.nvmlDeviceGetPowerUsage, h)
        gpus.append({"index": i, "uuid": uuid, "util_pct": None if util is None else float(util.gpu),
                     "mem_used_mb": None if mem is None else mem.used / MIB,
                     "mem_total_mb": None if mem is None else mem.total / MIB,
                     "temp_c": None if temp is None else float(temp), "power_w": None if power is None else power / 1000.0})
        for p in _get(nvml.nvmlDeviceGetComputeRunningProcesses, h) or []:
            used = getattr(p, "usedGpuMemory", None)  # None where the driver cannot say (some containers, WDDM)
            apps.append((int(p.pid), uuid, None if used is None else used / MIB))
    return GpuReading(time.time(), gpus, apps)


def reader() -> Callable[[], GpuReading | None] | None:
    """How this host is read: NVML where installed, else nvidia-smi on the PATH, else None (no GPUs)."""
    import shutil

    nvml = _nvml()
    if nvml is not None:
        return lambda: read_nvml(nvml)
    if shutil.which("nvidia-smi") is not None:
        return read_smi
    return None


def attribute(reading: GpuReading, task_of: Callable[[int], str | None]) -> dict[str, dict[str, float | None]]:
    """Task name -> {GPU index (a string: JSON's keys) -> MiB its processes hold there (None: held, amount
    not reported)}. A process of no task of the run (another user's, the supervisor's) counts for none."""
    index = {str(g["uuid"]): str(g["index"]) for g in reading.gpus}
    out: dict[str, dict[str, float | None]] = {}
    for pid, uuid, mb in reading.apps:
        task, gpu = task_of(pid), index.get(uuid)
        if task is None or gpu is None:
            continue
        held = out.setdefault(task, {})
        unknown = mb is None or (gpu in held and held[gpu] is None)
        held[gpu] = None if unknown else (held.get(gpu) or 0.0) + (mb or 0.0)
    return out


def pids_visible(reading: GpuReading, proc: str = "/proc") -> bool:
    """Whether the driver's pids are this /proc's: False when it lists compute processes none of which is
    here (a container without the host's pid namespace). Then no task can be matched, and none is said
    to hold nothing."""
    return not reading.apps or any(os.path.exists(f"{proc}/{pid}") for pid, _, _ in reading.apps)


class GpuSampler:
    """Reads the host every `every_s` seconds on a daemon thread; `latest` is the last reading."""

    def __init__(self, read: Callable[[], GpuReading | None], every_s: float = 1.0) -> None:
        self.read = read
        self.every_s = every_s
        self._latest: GpuReading | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def if_present(cls, every_s: float = 1.0) -> GpuSampler | None:
        read = reader()
        return None if read is None else cls(read, every_s)

    def _run(self) -> None:
        while True:
            # a driver's surprise must not end the readings for good (`latest` ages out meanwhile)
            with contextlib.suppress(Exception):
                self._latest = self.read() or self._latest
            time.sleep(self.every_s)

    def latest(self, max_age_s: float | None = None) -> GpuReading | None:
        """The last reading (the first call starts the thread); None while there is none, or when it is older
        than `max_age_s` (a hung nvidia-smi: no reading is better than an old one shown as current)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
            self._thread.start()
        r = self._latest
        if r is None or (max_age_s is not None and time.time() - r.t > max_age_s):
            return None
        return r
