"""This host's CPU and memory (psutil when installed, else /proc) and its GPUs (nvidia-smi where present:
the supervisor's facts carry them while it lives, training/telemetry/gpu_use.py)."""

from __future__ import annotations

from typing import Any

from ..telemetry.gpu_use import read_smi


class CpuMem:
    """CPU % since the previous call, and memory %: psutil when installed, else /proc."""

    def __init__(self) -> None:
        try:
            import psutil  # optional on cluster machines

            self._psutil: Any = psutil
            psutil.cpu_percent(None)
        except ImportError:
            self._psutil = None
        self._last = self._proc_stat()

    @staticmethod
    def _proc_stat() -> tuple[int, int] | None:
        try:
            with open("/proc/stat") as f:
                parts = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
        return sum(parts), idle

    def sample(self) -> tuple[float | None, float | None]:
        if self._psutil is not None:
            return float(self._psutil.cpu_percent(None)), float(self._psutil.virtual_memory().percent)
        cpu = None
        now = self._proc_stat()
        if now and self._last and now[0] > self._last[0]:
            total, idle = now[0] - self._last[0], now[1] - self._last[1]
            cpu = 100.0 * (total - idle) / total
        self._last = now
        mem = None
        try:
            info: dict[str, int] = {}
            with open("/proc/meminfo") as f:
                for line in f:
                    k, v = line.split(":", 1)
                    info[k] = int(v.split()[0])
            mem = 100.0 * (1 - info["MemAvailable"] / info["MemTotal"])
        except (OSError, KeyError, ValueError):
            pass
        return cpu, mem


def read_gpus() -> list[dict[str, Any]]:
    """The host's GPUs when no supervisor reads them for the agent (gpu_use.py: one nvidia-smi query)."""
    reading = read_smi(with_apps=False)
    return reading.gpus if reading is not None else []
