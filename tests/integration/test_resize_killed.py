"""`tfcluster resize` killed half-way (issue 37) over real sshd machines: the new host's supervisor and task
run, the resize process is SIGKILLed, and `tfcluster stop RUN` still stops them, because the record named
the new host as pending before it was launched (orchestrator/run/resize_pending.py).

The user's own plain-Python program (no TensorFlow). To kill the resize at a known step, not by a race:
the kept worker host's supervisor is SIGSTOPped first, so the resize launches the new host and then waits
for that supervisor to take the new plan, which it cannot; the test waits for the new worker's TF_CONFIG
file (it runs) and for the record to name the new host pending, then kills."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.run.local_ports import free_port_block
from testkit.sshd import Machines
from tests.helpers.procs import gone
from tests.helpers.tfconfig_program import first_pid, program_training
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import cli, cli_process, run_processes, started_run_id

pytestmark = pytest.mark.integration


def _hosts(machines: Machines, tmp: Path, name: str, roles: list[list[str]], base_port: int) -> Path:
    return machines.hosts_toml(tmp / name, roles=roles, base_port=base_port, training=program_training(tmp))


def _record(state: Path, run_id: str) -> dict[str, Any]:
    return dict(json.loads((state / "runs" / f"{run_id}.json").read_text()))


def test_stop_finds_the_new_host_of_a_killed_resize(machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    port = free_port_block(4 * 3)
    res = cli(state_dir, "start", str(_hosts(machines, tmp_path, "one.toml", [["ps"], ["worker"]], port)))
    assert res.returncode == 0, res.stderr
    run_id = started_run_id(res.stdout)
    first_pid(tmp_path, "worker", 0)
    m1_supervisor = psutil.Process(next(h["supervisor_pid"] for h in _record(state_dir, run_id)["hosts"]
                                        if h["name"] == "m1"))
    m1_supervisor.send_signal(signal.SIGSTOP)  # it cannot take the new plan: the resize waits there
    try:
        grown = _hosts(machines, tmp_path, "two.toml", [["ps"], ["worker"], ["worker"]], port)
        with cli_process(state_dir, "resize", run_id, str(grown)) as resize:
            new_worker = first_pid(tmp_path, "worker", 1, timeout=60)  # it runs on m2
            pending = wait_for(lambda: _record(state_dir, run_id).get("pending_resize"), 10, "m2 pending")
            assert resize.poll() is None, "the resize ended before it could be killed"
            os.killpg(resize.pid, signal.SIGKILL)  # as a closed terminal's kill: no undo runs
            resize.wait(timeout=10)
    finally:
        m1_supervisor.send_signal(signal.SIGCONT)
    record = _record(state_dir, run_id)
    assert [h["name"] for h in record["hosts"]] == ["m0", "m1"]  # the record is the run as it was
    assert isinstance(pending, dict) and [h["name"] for h in pending["hosts"]] == ["m2"]
    m2_processes = [p for p in run_processes(run_id) if p.environ().get("TFCLUSTER_RUN_DIR", "").endswith("/m2")]
    assert new_worker in {p.pid for p in m2_processes}, "the killed resize left m2's worker running"

    stop = cli(state_dir, "stop", run_id, "--grace", "1")
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert "m2" in stop.stdout and "stopped" in stop.stdout, stop.stdout
    assert all(gone(p.pid) for p in m2_processes), [p.pid for p in m2_processes if not gone(p.pid)]
    assert not run_processes(run_id)
    res = cli(state_dir, "stop", run_id, "--purge", "--grace", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not Path(machines.workdir(2), "runs", run_id, "m2").exists()  # the pending host's run dir purged
