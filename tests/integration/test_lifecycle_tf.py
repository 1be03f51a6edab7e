"""Real TensorFlow runs started by `tfcluster start` over real sshd on 3 loopback machines: the built-in
task programs in both modes, a restarted worker, and the user's own classic between-graph script.
Tiny models and few steps: TensorFlow's import time dominates on a small machine.
"""

from __future__ import annotations

import json
import os
import signal
import time
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


def test_between_graph_worker_killed_is_restarted_and_the_run_finishes(
    machines: Machines, tmp_path: Path, state_dir: Path
) -> None:
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps"], ["worker"], ["worker"]],
                                training={**TINY, "steps": 1500, "success": "all-workers",
                                          # each step 5x slower (sleeping): training outlasts a few status calls
                                          "slowdown": {"worker:0": 5.0, "worker:1": 5.0}})
    run_id = _start(state_dir, hosts)
    _all_running(state_dir, run_id, 3)

    def kill_running_worker1() -> bool:
        """SIGKILL worker:1 while it trains (its pid as status saw it, still alive)."""
        w = next(t for t in status_json(state_dir, run_id)[1]["tasks"] if t["name"] == "worker:1")
        if w["state"] != "running" or not w["pid"]:
            return False
        try:
            os.kill(w["pid"], signal.SIGKILL)
        except ProcessLookupError:  # it was between two attempts: look again
            return False
        return True

    wait_for(kill_running_worker1, 60, "worker:1 running, to kill it", interval=0.5)
    killed_at = time.time()
    st = _finish(state_dir, run_id)
    w1 = next(t for t in st["tasks"] if t["name"] == "worker:1")
    assert w1["restarts"] == 1 and w1["exit_code"] == 0
    # It rejoined: the restarted process connected and ran the training program to its end.
    log = Path(runs.load(run_id).host("m2").run_dir, "logs", "worker-1.log").read_text()
    assert "(attempt 2)" in log, log
    events = Path(runs.load(run_id).host("m2").run_dir, "events", "supervisor-m2.jsonl").read_text()
    restarted = [json.loads(line) for line in events.splitlines()]
    assert any(e["state"] == "running" and e["restarts"] == 1 and e["t"] > killed_at for e in restarted)


def _ended(state_dir: Path, run_id: str) -> dict[str, Any]:
    """Wait until the run ended by itself (no `stop`): every task final, no process of the run left."""
    def ended() -> dict[str, Any] | None:
        _, st = status_json(state_dir, run_id)
        return st if st["state"] in ("finished", "failed") and all(t["final"] for t in st["tasks"]) else None

    st = wait_for(ended, FINISH_TIMEOUT, f"run {run_id} to end by itself", interval=1.0)
    wait_for(lambda: not run_processes(run_id), 30, "every process of the run to exit")
    return st


@pytest.mark.parametrize(("mode", "victim"), [("between-graph", "worker:1"), ("in-graph", "chief:0")])
def test_finisher_dead_for_good_still_lets_the_run_end(
    machines: Machines, tmp_path: Path, state_dir: Path, mode: str, victim: str
) -> None:
    """A between-graph worker, or the in-graph client, SIGKILLed with `restart = "never"`: it never
    sends its done token, but its supervisor tells its peers it failed for good, so every supervisor
    ends its tasks and the run ends by itself, failed; `status` says so (exit code 1), naming the dead
    task."""
    roles = [["ps"], ["worker"], ["worker"]] if mode == "between-graph" else [["ps"], ["chief", "worker"], ["worker"]]
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=roles, mode=mode,
                                training={**TINY, "steps": 150, "restart": "never"})
    run_id = _start(state_dir, hosts)
    st = status_json(state_dir, run_id)[1]
    dead = next(t for t in st["tasks"] if t["name"] == victim)
    os.kill(dead["pid"], signal.SIGKILL)  # right after start: still importing TensorFlow, far from done
    st = _ended(state_dir, run_id)
    by_name = {t["name"]: t for t in st["tasks"]}
    assert by_name[victim]["signal"] == signal.SIGKILL and by_name[victim]["failed"], st
    assert not any(t["failed"] for name, t in by_name.items() if name != victim), _logs(state_dir, run_id)
    assert st["state"] == "failed"
    assert status_json(state_dir, run_id)[0] == 1
    assert by_name["ps:0"]["stopped_by"] == "run"  # ended by its supervisor, told by the victim's
