"""One full lifecycle with `[ssh] client = "openssh"` over real sshd on 3 loopback machines: check, start,
status, dash --once, logs -f, a killed worker restarted, stop; every command of it reaches each machine
through ONE shared connection (sshd logs one login per machine), and stop and `check --close` close them.
The rest of the suite runs over the default client (Paramiko); the contract both clients keep is
tests/integration/test_transport_contract.py."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from testkit.sshd import Machines
from tests.helpers.output import OutputLines
from tests.helpers.ssh_clients import openssh_control_dir
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import (
    cli,
    cli_process,
    dash_json,
    run_processes,
    status_json,
    unique_run_id,
)

pytestmark = pytest.mark.integration

TASK_PY = """\
import sys, time
job, task = sys.argv[1], sys.argv[2]
print(f"hello from {job}:{task}", flush=True)
n = 0
while True:
    n += 1
    print(f"tick {job}:{task} {n}", flush=True)
    time.sleep(0.2)
"""


@pytest.fixture
def control_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with openssh_control_dir(monkeypatch) as directory:
        yield directory


def sockets(directory: str) -> list[str]:
    return [name for name in os.listdir(directory) if not name.startswith(("cfg-", ".cfg-"))]


def masters(directory: str) -> list[psutil.Process]:
    """The live shared-connection processes (`ssh -N -f` with this control directory)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        try:
            if "-N" in cmd and f"ControlPath={directory}/%C" in cmd and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue  # gone meanwhile
    return found


def logins(m: Machines) -> list[int]:
    return [m.log_file(i).read_text().count("Accepted publickey") for i in range(len(m.addresses))]


def test_lifecycle_over_openssh_with_shared_connections(machines: Machines, tmp_path: Path, state_dir: Path,
                                                        control_dir: str) -> None:
    (tmp_path / "task.py").write_text(TASK_PY)
    hosts = machines.hosts_toml(tmp_path / "hosts.toml",
                                training={"command": "{python} task.py {job} {task}", "sync": ["task.py"]},
                                host_extra={i: {"ssh": {"client": "openssh"}} for i in range(3)})
    before = logins(machines)
    checked = cli(state_dir, "check", str(hosts))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert len(sockets(control_dir)) == 3 == len(masters(control_dir))  # one per machine, open for the next command
    run_id = unique_run_id("openssh")
    try:
        started = cli(state_dir, "start", str(hosts), "--run", run_id)
        assert started.returncode == 0, started.stdout + started.stderr
        code, st = status_json(state_dir, run_id)
        assert code == 0 and st["state"] == "running", st
        dash = dash_json(state_dir, run_id)
        assert {t["name"] for t in dash["tasks"]} == {"ps:0", "chief:0", "worker:0", "worker:1"}, dash

        with cli_process(state_dir, "logs", run_id, "worker:1", "-f") as proc:
            out = OutputLines(proc.stdout)
            out.expect("worker:1@m2 tick worker:1 ", 3)
            os.kill(proc.pid, signal.SIGINT)
            assert proc.wait(timeout=20) == 0

        worker1 = next(t for t in st["tasks"] if t["name"] == "worker:1")
        os.kill(worker1["pid"], signal.SIGKILL)  # m2 is this machine too: its pids are ours to see

        def restarted() -> dict[str, Any] | None:
            w = next(t for t in status_json(state_dir, run_id)[1]["tasks"] if t["name"] == "worker:1")
            return w if w["restarts"] == 1 and w["state"] == "running" else None

        assert wait_for(restarted, 90, "worker:1 restarted")["pid"] != worker1["pid"]
        # Every command so far went through the one connection check opened on each machine.
        assert [n - b for n, b in zip(logins(machines), before, strict=True)] == [1, 1, 1]

        stopped = cli(state_dir, "stop", run_id)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert "closed the shared ssh connections to m0, m1, m2" in " ".join(stopped.stdout.split())
        assert run_processes(run_id) == []
        wait_for(lambda: not sockets(control_dir), 10, "the shared connections' sockets removed")
        wait_for(lambda: not masters(control_dir), 10, "the shared connections' processes gone")
    finally:
        if run_processes(run_id):
            cli(state_dir, "stop", run_id, "--grace", "1")

    assert cli(state_dir, "check", str(hosts)).returncode == 0  # opens them again, without a prompt
    closed = cli(state_dir, "check", str(hosts), "--close")
    assert closed.returncode == 0 and "closed the shared ssh connections to m0, m1, m2" in closed.stdout
    assert cli(state_dir, "check", str(hosts), "--close").stdout.strip() == "no shared ssh connection was open"
