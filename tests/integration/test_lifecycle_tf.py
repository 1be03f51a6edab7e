"""A real TensorFlow in-graph run started by `tfcluster start --mode in-graph` over real sshd on 3 loopback
machines (the flag overrides the file's mode) runs to `finished`, every task exiting 0 or ended by the run.
Tiny model and few steps: TensorFlow's import time dominates on a small machine.

A restarted between-graph worker that rejoins: tests/faults/test_between_graph_faults.py; a finisher dead
for good (the supervisors' policy, whatever the program): tests/integration/test_lifecycle.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.run import records as runs
from testkit.sshd import Machines
from tests import requires
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import (
    cli,
    run_processes,
    started_run_id,
    status_json,
)

pytestmark = pytest.mark.integration
requires.tensorflow()

FINISH_TIMEOUT = 180.0
TINY = {"model": "mlp", "batch_size": 16, "progress_interval": 0.5, "checkpoint_every_secs": 600.0}


def _start(state_dir: Path, hosts: Path, *args: str) -> str:
    res = cli(state_dir, "start", str(hosts), "--timeout", "120", *args)
    assert res.returncode == 0, res.stdout + res.stderr
    return started_run_id(res.stdout)


def _finish(state_dir: Path, run_id: str) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        _code, st = status_json(state_dir, run_id)
        assert st["state"] not in ("failed", "stopped"), _logs(state_dir, run_id)
        return st if st["state"] == "finished" else None

    st = wait_for(finished, FINISH_TIMEOUT, f"run {run_id} to finish", interval=1.0)
    # Each exited 0, or was a server the run ended once the tasks it waits for had finished.
    assert all(t["exit_code"] == 0 or t["stopped_by"] == "run" for t in st["tasks"]), st
    wait_for(lambda: not run_processes(run_id), 15, "every process of the run to exit")
    return st


def _logs(state_dir: Path, run_id: str) -> str:
    return cli(state_dir, "logs", run_id, "-n", "15").stdout


def _all_running(state_dir: Path, run_id: str, n: int) -> dict[str, Any]:
    """`start` returns once every task is spawned; a trainer is `starting` until its first step."""
    def running() -> dict[str, Any] | None:
        code, st = status_json(state_dir, run_id)
        assert code == 0 and len(st["tasks"]) == n, st
        assert not any(t["failed"] for t in st["tasks"]), st
        return st if all(t["state"] in ("running", "exited") for t in st["tasks"]) else None

    return wait_for(running, 120, f"every task of {run_id} running", interval=1.0)


def test_in_graph_run_finishes(machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps"], ["chief", "worker"], ["worker"]],
                                mode="between-graph", training={**TINY, "steps": 40})
    run_id = _start(state_dir, hosts, "--mode", "in-graph")  # the flag overrides the file
    st = _all_running(state_dir, run_id, 4)
    assert {t["name"] for t in st["tasks"]} == {"ps:0", "chief:0", "worker:0", "worker:1"}
    assert runs.load(run_id).mode == "in-graph"
    _finish(state_dir, run_id)
