"""Processes in tests: the live processes carrying a run's marker (TFCLUSTER_RUN_DIR in their environment,
read by psutil: independent of the code under test), wait for a pid to be written or a process to be gone
(a zombie counts as gone: it no longer runs), and stop whatever a test left running in a run dir."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import psutil

from orchestrator.run.sh_stop import parse_sh_stop, sh_stop_script
from orchestrator.transport.base import CommandResult
from tests.helpers.waiting import wait_for
from training.run.layout import RUN_DIR_ENV
from training.telemetry.state_files import StopReport


def marked(run_dir_matches: Callable[[str], bool]) -> list[psutil.Process]:
    """Every live (not zombie) process with a TFCLUSTER_RUN_DIR marker that `run_dir_matches` (a process
    without one is never asked about: these lists are what tests kill)."""
    found = []
    for p in psutil.process_iter():
        try:
            run_dir = p.environ().get(RUN_DIR_ENV, "")
            if run_dir and run_dir_matches(run_dir) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


def cmdline(p: psutil.Process) -> list[str]:
    """Its command line, or [] once it is gone or a zombie (a process listed a moment ago may be either)."""
    try:
        return [str(word) for word in p.cmdline()]
    except psutil.Error:
        return []


def read_pid(path: Path, timeout: float = 10.0) -> int:
    def written() -> int | None:
        text = path.read_text().strip() if path.exists() else ""
        return int(text) if text.isdigit() else None

    pid: int = wait_for(written, timeout, f"a pid written to {path}", interval=0.02)
    return pid


def gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def wait_gone(pid: int, timeout: float = 10.0) -> None:
    wait_for(lambda: gone(pid), timeout, f"process {pid} to be gone")


def stop_run_dir(run_dir: str, grace: float = 0.5, purge: bool = False) -> StopReport:
    """`tfcluster stop`'s own script for one host (orchestrator/run/sh_stop.py) under this machine's
    /bin/sh: what a test leaves running in a run dir is stopped the way a user's stop does it."""
    script = sh_stop_script(run_dir, grace, purge)
    done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=60 + grace, check=False)
    return parse_sh_stop("local", CommandResult("local", "stop", done.returncode, done.stdout, done.stderr, 0.0))[0]
