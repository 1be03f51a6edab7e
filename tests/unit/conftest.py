"""Fixtures of the unit tier."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator

import pytest

from tests.helpers.procs import stop_run_dir


@pytest.fixture
def cleanup() -> Iterator[tuple[list[subprocess.Popen[bytes]], list[str]]]:
    procs: list[subprocess.Popen[bytes]] = []
    dirs: list[str] = []
    yield procs, dirs
    for d in dirs:
        stop_run_dir(d)
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
