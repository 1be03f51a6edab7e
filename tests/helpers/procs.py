"""Wait for a process to be gone (a zombie counts as gone: it no longer runs)."""

from __future__ import annotations

import time
from pathlib import Path

import psutil


def read_pid(path: Path, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text().strip() if path.exists() else ""
        if text.isdigit():
            return int(text)
        time.sleep(0.02)
    raise AssertionError(f"no pid written to {path}")


def is_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
