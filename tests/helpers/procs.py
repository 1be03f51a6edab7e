"""Processes in tests: wait for a pid to be written or a process to be gone (a zombie counts as gone: it
no longer runs), and stop whatever a test left running in a run dir."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psutil

from orchestrator.run.sh_stop import parse_sh_stop, sh_stop_script
from orchestrator.transport.base import CommandResult
from training.telemetry.state_files import StopReport


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


def stop_run_dir(run_dir: str, grace: float = 0.5, purge: bool = False) -> StopReport:
    """`tfcluster stop`'s own script for one host (orchestrator/run/sh_stop.py) under this machine's
    /bin/sh: what a test leaves running in a run dir is stopped the way a user's stop does it."""
    script = sh_stop_script(run_dir, grace, purge)
    done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=60 + grace, check=False)
    return parse_sh_stop("local", CommandResult("local", "stop", done.returncode, done.stdout, done.stderr, 0.0))[0]
