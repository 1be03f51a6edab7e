"""Shared fixtures: real sshd machines on loopback addresses (see testkit/sshd.py), for tests/integration and
tests/faults; `spawned`, the processes a test starts, killed at its end."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import suppress

import pytest

from testkit import sshd
from testkit.sshd import Machines

# The issue-14 before/after evidence runs only when asked (benchmarks/issue14_regressions.py sets this and
# runs it against two checkouts); in every run the fault suite and the unit tests cover the same behaviours.
if not os.environ.get("TFCLUSTER_REGRESSIONS"):
    collect_ignore = ["integration/test_issue14_regressions.py"]


@pytest.fixture(scope="session")
def sshd_machines() -> Iterator[Callable[[int], Machines]]:
    """Factory: `sshd_machines(n)` starts n fresh loopback machines (lazily: nothing runs until called).

    Every sshd started through it is killed at the end of the session."""
    missing = sshd.sshd_available()

    def start(n: int) -> Machines:
        if missing:
            pytest.fail(missing)
        return sshd.start_machines(n)

    try:
        yield start
    finally:
        sshd.stop_all()


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts (it appends them); each still running at the end is killed, with its
    process group when it leads one."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            with suppress(ProcessLookupError):  # it may end meanwhile
                if os.getpgid(p.pid) == p.pid:
                    os.killpg(p.pid, signal.SIGKILL)
                else:
                    p.kill()
        p.wait()
