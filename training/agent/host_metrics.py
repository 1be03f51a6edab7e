"""This host's CPU and memory (psutil when installed, else /proc) and its GPUs (nvidia-smi where present)."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any


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


def parse_nvidia_smi(output: str) -> list[dict[str, Any]]:
    """`nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits`."""
    gpus = []
    for line in output.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            continue
        try:
            gpus.append({"index": int(parts[0]), "util_pct": float(parts[1]), "mem_used_mb": float(parts[2]),
                         "mem_total_mb": float(parts[3])})
        except ValueError:
            continue
    return gpus


def read_gpus() -> list[dict[str, Any]]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        res = subprocess.run(["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used,memory.total",
                              "--format=csv,noheader,nounits"], check=False, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_nvidia_smi(res.stdout) if res.returncode == 0 else []
