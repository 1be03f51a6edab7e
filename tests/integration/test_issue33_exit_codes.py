"""Issue 33 over real sshd: `start` and `stop` exit with the README's code for an unreachable host (3), and
1 when a host was reached and failed there (items 1); a state directory where no run record can be written
refuses `start` in one line, exit 2, before any host is reached (item 3).

A machine is made unreachable by stopping its sshd (testkit/sshd.py Machines.stop): connection refused.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from testkit.sshd import Machines
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import cli, run_processes, status_json, unique_run_id

pytestmark = pytest.mark.integration

PROGRAM = "import time\nprint('up', flush=True)\ntime.sleep(120)\n"


def _hosts(machines: Machines, tmp_path: Path, **host_extra: dict[str, object]) -> Path:
    (tmp_path / "prog.py").write_text(PROGRAM)
    return machines.hosts_toml(tmp_path / "hosts.toml", training={"command": "{python} prog.py", "sync": ["prog.py"]},
                               host_extra={int(k[1:]): v for k, v in host_extra.items()})


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]  # the others: progress rows


def _start_with_m2_down(machines: Machines, state_dir: Path, hosts: Path, run_id: str) -> subprocess.CompletedProcess[str]:
    """`start` while m2's sshd is stopped (started again after)."""
    machines.stop(2)
    try:
        return cli(state_dir, "start", str(hosts), "--run", run_id, "--timeout", "30")
    finally:
        machines.start(2)


def test_start_with_a_host_unreachable_exits_3(machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    hosts = _hosts(machines, tmp_path)
    run_id = unique_run_id("unreachable-start")
    res = _start_with_m2_down(machines, state_dir, hosts, run_id)
    assert res.returncode == 3, res.stderr
    errors = _errors(res.stderr)
    assert len(errors) == 1 and errors[0].startswith("error: host m2: refused"), res.stderr
    assert "Traceback" not in res.stderr and run_processes(run_id) == []


def test_start_with_a_host_unreachable_and_one_failing_there_exits_1(machines: Machines, tmp_path: Path,
                                                                     state_dir: Path) -> None:
    """A failure a host reported is known: 1, though another host could not be reached."""
    blocker = tmp_path / "a-file"
    blocker.write_text("nothing can be created beneath a regular file")
    hosts = _hosts(machines, tmp_path, m1={"workdir": str(blocker / "work")})
    run_id = unique_run_id("mixed-start")
    res = _start_with_m2_down(machines, state_dir, hosts, run_id)
    assert res.returncode == 1, res.stderr
    errors = _errors(res.stderr)
    assert len(errors) == 1 and "host m1: prepare" in errors[0] and "m2: refused" in errors[0], res.stderr
    assert run_processes(run_id) == []


def test_stop_with_a_host_unreachable_exits_3(machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    hosts = _hosts(machines, tmp_path)
    run_id = unique_run_id("unreachable-stop")
    started = cli(state_dir, "start", str(hosts), "--run", run_id)
    assert started.returncode == 0, started.stderr
    machines.stop(2)  # its supervisor (detached) keeps running: only its sshd is gone
    try:
        res = cli(state_dir, "stop", run_id, "--timeout", "5", "--grace", "1")
        assert res.returncode == 3, res.stdout + res.stderr
        line = next(x for x in res.stdout.splitlines() if "m2" in x)
        assert "unreachable" in line and "refused" in line, res.stdout
        _code, st = status_json(state_dir, run_id)
        assert st["state"] == "partial", st
        # m2's supervisor hears from its peers that the run was stopped and stops its own task
        wait_for(lambda: not run_processes(run_id), 30, "m2's supervisor to end the run there too")
    finally:
        machines.start(2)
    again = cli(state_dir, "stop", run_id)  # every host reached, nothing left: 0
    assert again.returncode == 0, again.stdout + again.stderr


def _connections(machines: Machines) -> list[int]:
    """How many connections each machine's sshd has logged (LogLevel VERBOSE logs each one)."""
    return [machines.log_file(i).read_text(errors="replace").count("Connection from") for i in range(3)]


def test_an_unwritable_state_dir_refuses_start_before_any_host(machines: Machines, tmp_path: Path,
                                                               state_dir: Path) -> None:
    """A file where the records' directory goes: refused for root too (a read-only mode bit is not)."""
    hosts = _hosts(machines, tmp_path)
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "runs").write_text("a file where the run records' directory goes\n")
    before = _connections(machines)
    res = cli(state_dir, "start", str(hosts), "--run", unique_run_id("no-state"))
    assert res.returncode == 2, res.stderr
    assert res.stderr == (f"error: state directory {state_dir / 'runs'}: cannot write run records there (a file is "
                          "there, not a directory); make it writable or set TFCLUSTER_STATE_DIR to a directory that "
                          "is\n"), res.stderr
    assert res.stdout == ""
    assert _connections(machines) == before  # no host was reached
    assert cli(state_dir, "check", str(hosts)).returncode == 0
    assert all(a > b for a, b in zip(_connections(machines), before, strict=True))  # where one is, it shows
