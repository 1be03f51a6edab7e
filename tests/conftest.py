"""Shared fixtures: real sshd machines on loopback addresses (see testkit/sshd.py), for tests/integration and
tests/faults; a real three-node Slurm cluster on this machine (see testkit/slurm.py)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testkit import slurm, sshd
from testkit.slurm import SlurmCluster
from testkit.sshd import Machines
from tests.integration.lifecycle_helpers import cli, kill_run, records, run_processes

# The issue-14 before/after evidence runs only when asked (benchmarks/issue14_regressions.py sets this and
# runs it against two checkouts); in every run the fault suite and the unit tests cover the same behaviours.
if not os.environ.get("TFCLUSTER_REGRESSIONS"):
    collect_ignore = ["integration/test_issue14_regressions.py"]


@pytest.fixture(autouse=True)
def state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own tfcluster state dir (run records, remembered file hashes), never the user's,
    also for the CLI processes it starts. At the end, every run recorded there that still has processes
    is stopped (`tfcluster stop`), then anything of it still alive is killed: a failed test leaves nothing."""
    path = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("TFCLUSTER_STATE_DIR", str(path))
    yield path
    for record in records(path):
        if run_processes(record["run_id"]):
            cli(path, "stop", record["run_id"], "--grace", "1")
            kill_run(record["run_id"])


@pytest.fixture(scope="session")
def sshd_machines() -> Iterator[Callable[..., Machines]]:
    """Factory: `sshd_machines(n, shared_workdir=True, home=None)` starts n fresh loopback machines (lazily:
    nothing runs until called), sharing one workdir as an NFS home does unless `shared_workdir=False` (for
    tests that need local disks: they say so); `home`: every session's HOME (bash reads its .bashrc).

    Every sshd started through it is killed at the end of the session."""
    missing = sshd.sshd_available()

    def start(n: int, *, shared_workdir: bool = True, home: str | None = None) -> Machines:
        if missing:
            pytest.fail(missing)
        return sshd.start_machines(n, shared_workdir=shared_workdir, home=home)

    try:
        yield start
    finally:
        sshd.stop_all()


@pytest.fixture(scope="module")
def machines(request: pytest.FixtureRequest, sshd_machines: Callable[..., Machines]) -> Machines:
    """Three loopback machines for a test module, sharing one workdir (the topology of an NFS home); a
    module that needs local disks sets `SHARED_WORKDIR = False` and says why."""
    return sshd_machines(3, shared_workdir=getattr(request.module, "SHARED_WORKDIR", True))


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """munged, slurmctld and three slurmd (nodes n1, n2, n3), started when a test first asks for them and
    stopped at the end of the session: every job cancelled, every daemon and job process killed."""
    missing = slurm.slurm_available()
    if missing:
        pytest.fail(missing)
    cluster = slurm.start_cluster()
    try:
        yield cluster
    finally:
        slurm.remove(cluster)
