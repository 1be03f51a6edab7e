"""The dashboard's "remove this worker" (orchestrator/run/remove_worker.py) on a real run over sshd machines, the
user's own plain-Python program (no TensorFlow): removing a middle worker gives its index to the last
worker, which restarts as it on its own host with a TF_CONFIG of two workers; the removed worker's process
ends; the others run on untouched; the record holds the new plan, nothing pending."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from orchestrator.run.local_ports import free_port_block
from orchestrator.run.remove_worker import WorkerRemover
from orchestrator.run.resize import ResizeOptions
from testkit.sshd import Machines
from tests.helpers.tfconfig_program import first_pid, program_training, tf_configs
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import cli, run_processes, started_run_id

pytestmark = pytest.mark.integration

def test_removing_a_middle_worker_moves_the_last_into_its_place(machines: Machines, tmp_path: Path,
                                                                 state_dir: Path) -> None:
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps"], ["worker"], ["worker"]],
                                base_port=free_port_block(4 * 3), host_extra={1: {"workers": 2}},
                                training=program_training(tmp_path))
    res = cli(state_dir, "start", str(hosts))
    assert res.returncode == 0, res.stderr
    run_id = started_run_id(res.stdout)
    first = {i: first_pid(tmp_path, "worker", i) for i in range(3)}
    ps = first_pid(tmp_path, "ps", 0)

    remover = WorkerRemover(run_id, ResizeOptions(timeout=60))
    assert remover.can_remove("worker:1") and not remover.can_remove("worker:0") and not remover.can_remove("ps:0")
    assert remover.preview("worker:1") == ["worker:1 moves m1 -> m2 (restarted there)", "worker:2 on m2 is stopped"]
    said = remover.remove("worker:1")
    assert said.startswith(f"removed worker:1 from {run_id} in ") and "NOT verified" not in said, said

    restarted = wait_for(lambda: tf_configs(tmp_path, "worker", 1)[1:], 30, "worker:1 restarted on m2")
    pid, config = restarted[-1]
    assert config["task"] == {"type": "worker", "index": 1} and len(config["cluster"]["worker"]) == 2
    assert json.loads(psutil.Process(pid).environ()["TF_CONFIG"]) == config
    assert psutil.Process(pid).environ()["TFCLUSTER_HOST"] == "m2"
    assert not psutil.pid_exists(first[1]) and not psutil.pid_exists(first[2])  # both stopped, on m1 and m2
    assert psutil.pid_exists(first[0]) and psutil.pid_exists(ps)  # the others untouched
    record = json.loads((state_dir / "runs" / f"{run_id}.json").read_text())
    assert [t["host"] for t in record["plan"]["tasks"] if t["job"] == "worker"] == ["m1", "m2"]
    assert "pending_resize" not in record and record["resizes"][-1]["moved"] == ["worker:1"]
    stop = cli(state_dir, "stop", run_id, "--grace", "1")
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert not run_processes(run_id)
