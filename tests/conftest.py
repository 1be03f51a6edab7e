"""Shared fixtures: real sshd machines on loopback addresses (see testkit/sshd.py), for tests/integration and
tests/faults; a real three-node Slurm cluster on this machine (see testkit/slurm.py); `spawned`, the processes a
test starts, killed at its end."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path

import pytest
from hypothesis import settings

from orchestrator.run import local_ports
from testkit import slurm, sshd
from testkit.slurm import SlurmCluster
from testkit.sshd import Machines
from tests.integration.lifecycle_helpers import isolated_state_dir

# Property tests draw the same examples on every run (a seed per test): a suite run fails only for a change,
# never for an example one run happened to draw (CI at the declared floors once did, on test_text_table).
# HYPOTHESIS_PROFILE=explore draws new examples each run, to look for more.
settings.register_profile("suite", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))


def pytest_configure(config: pytest.Config) -> None:
    """Parallel workers (pytest-xdist, `make test`) pick ports from disjoint ranges: a port one worker found
    free is never taken by another before its server binds it (orchestrator/run/local_ports.py)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit():
        low, high = 20000, min(60000, local_ports.ephemeral_low())
        width = (high - low) // int(count)
        first = low + int(worker[2:]) * width
        os.environ[local_ports.RANGE_ENV] = f"{first}-{first + width - 1}"
    # A suite started in the background of a non-interactive shell (`make test &`) inherits SIGINT ignored,
    # and so would every CLI it starts: the Ctrl-C tests would see no Ctrl-C. A handler (not SIG_IGN) is
    # reset to the default at exec, so the CLIs get Python's KeyboardInterrupt as at a terminal.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # The user's own state dir is never the suite's, even for what runs before the `state_dir` fixture
    # isolates a test (a fixture it evaluates first, a session fixture): a run recorded there would
    # appear in the user's `tfcluster ls`.
    os.environ["TFCLUSTER_STATE_DIR"] = tempfile.mkdtemp(prefix="tfcluster-test-state-")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the marks (make test: --dist loadgroup)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """What must stay on one parallel worker, in file order: each fault module's stages (they share one live
    run; per mode where a module runs one per mode), and the Slurm tests (one Slurm cluster per worker
    otherwise). Every other test goes to whichever worker is free."""
    for item in items:
        path = Path(str(item.fspath))
        group = None
        if path.parent.name == "faults" and path.name.startswith("test_"):
            params = getattr(getattr(item, "callspec", None), "params", {})
            group = f"faults-{path.stem}" + (f"-{params['run']}" if "run" in params else "")
        elif "slurm_cluster" in getattr(item, "fixturenames", ()):
            group = "slurm"
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


# The issue-14 before/after evidence runs only when asked (benchmarks/issue14_regressions.py sets this and
# runs it against two checkouts); in every run the fault suite and the unit tests cover the same behaviours.
if not os.environ.get("TFCLUSTER_REGRESSIONS"):
    collect_ignore = ["integration/test_issue14_regressions.py"]


@pytest.fixture(autouse=True)
def state_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own tfcluster state dir (run records, remembered file hashes), never the user's,
    also for the CLI processes it starts. At the end, every run recorded there that still has processes
    is stopped (`tfcluster stop`), then anything of it still alive is killed: a failed test leaves nothing.

    A test of a module whose run outlives each test (the fault suite's module-scoped `run`, whose `.state`
    is its state dir) uses that run's state dir instead, and that fixture cleans up."""
    shared = request.getfixturevalue("run") if "run" in request.fixturenames else None
    if shared is not None and isinstance(getattr(shared, "state", None), Path):
        monkeypatch.setenv("TFCLUSTER_STATE_DIR", str(shared.state))
        yield shared.state
        return
    with isolated_state_dir(tmp_path_factory.mktemp("state"), monkeypatch) as path:
        yield path


@pytest.fixture(scope="session")
def sshd_machines() -> Iterator[Callable[..., Machines]]:
    """Factory: `sshd_machines(n, shared_workdir=True, home=None, user_ca=False)` starts n fresh loopback
    machines (lazily: nothing runs until called), sharing one workdir as an NFS home does unless
    `shared_workdir=False` (for tests that need local disks: they say so); `home`: every session's HOME (bash
    reads its .bashrc); `user_ca`: sshd also accepts user certificates (testkit Machines.sign_user_key).

    Every sshd started through it is killed at the end of the session."""
    missing = sshd.sshd_available()

    def start(n: int, *, shared_workdir: bool = True, home: str | None = None, user_ca: bool = False) -> Machines:
        if missing:
            pytest.fail(missing)
        return sshd.start_machines(n, shared_workdir=shared_workdir, home=home, user_ca=user_ca)

    try:
        yield start
    finally:
        sshd.stop_all()


@pytest.fixture(scope="module")
def machines(request: pytest.FixtureRequest, sshd_machines: Callable[..., Machines]) -> Iterator[Machines]:
    """Three loopback machines for a test module, sharing one workdir (the topology of an NFS home); a
    module that needs local disks sets `SHARED_WORKDIR = False` and says why. Closed with the module: its
    sshd processes do not wait for the end of the session."""
    m = sshd_machines(3, shared_workdir=getattr(request.module, "SHARED_WORKDIR", True))
    yield m
    m.close()


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
