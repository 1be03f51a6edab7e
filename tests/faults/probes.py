"""What the between-graph fault stages look at or do besides the run's own CLI: a small filesystem for the
chief's checkpoints and filling it, the dashboard's agents on the hosts, the latest checkpoint as
TensorFlow loads it, and ps:0's life as its supervisor recorded it (events/supervisor-m0.jsonl).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from orchestrator.run import records as runs
from tests.faults.cluster import FaultRun
from tests.integration.lifecycle_helpers import cli
from training.run.layout import host_module

AS_ROOT = os.geteuid() == 0


@contextlib.contextmanager
def checkpoint_disk(path: Path) -> Iterator[Path]:
    """A small filesystem of its own for the chief's checkpoints (tmpfs, as root), else a plain dir."""
    path.mkdir(parents=True)
    if AS_ROOT:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        if AS_ROOT:
            subprocess.run(["umount", "-l", str(path)], check=False)
        else:
            path.chmod(0o700)


def status_of(run: FaultRun, run_id: str) -> tuple[int, dict[str, Any]]:
    res = cli(run.state, "status", run_id, "--json", timeout=60)
    assert res.stdout.strip(), res.stderr
    return res.returncode, json.loads(res.stdout)


def dash_once(run: FaultRun) -> tuple[int, dict[str, Any]]:
    res = cli(run.state, "dash", run.run_id, "--once", "--json", "--interval", "0.5", timeout=90)
    assert res.stdout.strip(), res.stderr
    return res.returncode, json.loads(res.stdout)


def agents_of(run: FaultRun) -> list[psutil.Process]:
    dirs = {runs.load(run.run_id).host(h).run_dir for h in ("m0", "m1", "m2")}
    found = []
    for p in psutil.process_iter():
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if host_module("agent") in cmd and any(d in cmd for d in dirs):
            found.append(p)
    return found


def checkpoint_dir(run: FaultRun) -> str:
    return str(runs.load(run.run_id).plan.training.checkpoint_dir)


def fill(directory: str) -> Path:
    """Write a file until the filesystem is full (tmpfs), or make the directory read-only (no root)."""
    filler = Path(directory, "filler")
    if not AS_ROOT:
        Path(directory).chmod(0o500)
        return filler
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)  # unbuffered: ENOSPC surfaces at each write
    try:
        for size in (1 << 16, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


def running_again(run: FaultRun, task: str, after: float) -> float | None:
    """When `task`'s supervisor recorded it running again (a new process) after `after`."""
    job, index = task.split(":")
    host = next(t["host"] for t in run.status()[1]["tasks"] if t["name"] == task)
    path = Path(run.run_dir(host), "events", f"supervisor-{host}.jsonl")
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            e = json.loads(line)
            if e.get("job") == job and e.get("task") == int(index) and e.get("state") == "running" \
                    and e.get("t", 0) > after:
                return float(e["t"])
    return None

