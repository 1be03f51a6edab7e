"""Issue 33 #4 over real sshd: a task's daemon that leaves the run's session and clears its environment
(`env -i setsid sleep 1000`, orphaned at once) carries no run marker and no group `stop` knows; the
supervisor, a child subreaper, owns it all the same and `stop` ends it. When the supervisor died before
the stop, nobody can know what such a daemon became: `stop` says so instead of "none".
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from testkit.sshd import Machines
from tests.helpers.procs import gone, read_pid
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import cli, started_run_id, status_json
from training.run.layout import RUN_DIR_ENV

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

# Starts a daemon in its own session with an empty environment, orphaned at once (its shell exits), says
# its pid in a file, and runs until stopped.
PROG_PY = """\
import subprocess, sys, time
out = sys.argv[1]
daemon = 'env -i setsid sleep 1000 >/dev/null 2>&1 & echo $! > "$1.tmp" && mv "$1.tmp" "$1"'
subprocess.run(["sh", "-c", daemon, "sh", out], check=True)
while True:
    time.sleep(0.5)
"""
ROLES = [["ps"], ["chief", "worker"], ["worker"]]  # m1: chief:0 and worker:0
TASKS = ("ps-0", "chief-0", "worker-0", "worker-1")


@pytest.fixture
def daemons() -> Iterator[list[int]]:
    """The daemons' pids, as the test learns them; any still sleeping at the end is killed here."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            if p.cmdline() == ["sleep", "1000"]:
                p.kill()


def _start(machines: Machines, tmp_path: Path, state_dir: Path, daemons: list[int]) -> str:
    (tmp_path / "prog.py").write_text(PROG_PY)
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=ROLES, training={
        "command": "{python} prog.py " + str(tmp_path) + "/{job}-{task}.pid", "sync": ["prog.py"],
        "restart": "never"})
    res = cli(state_dir, "start", str(hosts))
    assert res.returncode == 0, res.stdout + res.stderr
    run_id = started_run_id(res.stdout)
    for name in TASKS:
        pid = read_pid(tmp_path / f"{name}.pid", timeout=60)
        daemons.append(pid)
        env = psutil.Process(pid).environ()
        assert RUN_DIR_ENV not in env and os.getsid(pid) == pid, (name, env)  # no marker, its own session
    return run_id


def test_stop_ends_a_daemon_that_left_the_session_and_the_environment(
        machines: Machines, tmp_path: Path, state_dir: Path, daemons: list[int]) -> None:
    run_id = _start(machines, tmp_path, state_dir, daemons)
    res = cli(state_dir, "stop", run_id, "--grace", "5")
    assert res.returncode == 0, res.stdout + res.stderr
    assert [pid for pid in daemons if not gone(pid)] == [], res.stdout
    assert "unknown" not in res.stdout and "none" in res.stdout, res.stdout  # and it knows


def test_stop_does_not_claim_none_when_the_supervisor_died_first(
        machines: Machines, tmp_path: Path, state_dir: Path, daemons: list[int]) -> None:
    run_id = _start(machines, tmp_path, state_dir, daemons)

    def supervisor_pid() -> int | None:
        hosts = {h["name"]: h for h in status_json(state_dir, run_id)[1]["hosts"]}
        pid = hosts.get("m1", {}).get("supervisor_pid")
        return pid if isinstance(pid, int) else None

    sup = wait_for(supervisor_pid, 30, "m1's supervisor pid in status")
    os.kill(sup, signal.SIGKILL)
    wait_for(lambda: gone(sup), 10, "m1's supervisor gone")
    res = cli(state_dir, "stop", run_id, "--grace", "5")
    m1 = next(line for line in res.stdout.splitlines() if " m1 " in f" {line} ")
    assert "unknown: its supervisor died before it ended its processes" in m1, res.stdout
    assert "none" not in m1, res.stdout
