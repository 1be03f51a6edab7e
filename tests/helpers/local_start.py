"""One host's start conversation over a LocalTransport session: orchestrator.run.start_host talking to the
real training/launcher.py (a real /bin/sh and python, real files in a temp workdir), held at the barrier
while a test looks, then released (the host removes what it prepared). No network, no TensorFlow."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from orchestrator.config.schema import SSHOptions
from orchestrator.plan.model import HostPlan
from orchestrator.run.file_hashes import FileHashes
from orchestrator.run.ship import FileSets, sync_files, training_package_files
from orchestrator.run.start_host import HostStart, StartContext
from orchestrator.transport.factory import transport_for


def local_host(workdir: Path | str, name: str = "local") -> HostPlan:
    return HostPlan(name=name, address="127.0.0.1", transport="local", python=sys.executable,
                    workdir=str(workdir), ssh=SSHOptions(), roles=("worker",), tasks=())


def file_sets(src: Path, sync: list[str], *, package: bool = False) -> FileSets:
    """The user's `sync` entries under src, and tfcluster's package when asked (it costs ~100 files)."""
    hashes = FileHashes()
    return FileSets(tree=sync_files(sync, str(src), hashes), package=training_package_files(hashes) if package else [])


def start_context(files: FileSets, run_id: str = "r1", run_json: bytes = b"{}", **extra: Any) -> StartContext:
    return StartContext(run_id=run_id, run_file=lambda host: run_json, files=files, op_timeout=60, timeout=60,
                        deadline=time.monotonic() + 60, allow_partial=False, progress=lambda *a: None,
                        cancel=threading.Event(), **extra)


def release(start: HostStart) -> None:
    start.abort()
    start.await_end(time.monotonic() + 30)


@contextlib.contextmanager
def prepared(workdir: Path | str, files: FileSets, run_id: str = "r1", run_json: bytes = b"{}",
             host: str = "local", **extra: Any) -> Iterator[HostStart]:
    """Phase 1 on one local host; the host waits at the barrier inside the block and is released after."""
    start = HostStart(local_host(workdir, host), start_context(files, run_id, run_json, **extra), transport_for)
    try:
        start.prepare()
        yield start
    finally:
        release(start)
