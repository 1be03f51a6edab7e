"""The dashboard's data path end to end: a real between-graph TensorFlow run (1 ps, 2 workers) started by
`tfcluster start` on 3 loopback machines behind real sshd; one agent per host over SSH.

Checks `tfcluster dash --once --json` (step rates, measured PS traffic > 0 next to the accounted one,
liveness) and that a SIGKILLed worker shows as exited/restarting within 3 intervals.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.monitor.collect import Collector
from orchestrator.monitor.state_json import state_json
from orchestrator.run import records as runs
from testkit.sshd import Machines
from tests import requires
from tests.integration.lifecycle_helpers import cli, isolated_state_dir, started_run_id, status_json, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]
requires.tensorflow()

INTERVAL = 1.0
TRAINING = {"model": "mlp", "batch_size": 16, "progress_interval": 0.5, "checkpoint_every_secs": 600.0,
            "steps": 1_000_000, "restart": "on-failure"}


@pytest.fixture(scope="module")
def machines(sshd_machines: Callable[[int], Machines]) -> Machines:
    return sshd_machines(3)


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with isolated_state_dir(tmp_path, monkeypatch, stop="always") as state:
        yield state


def test_dash_once_json_and_killed_worker(machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps"], ["worker"], ["worker"]], training=TRAINING)
    res = cli(state_dir, "start", str(hosts), "--timeout", "120")
    assert res.returncode == 0, res.stdout + res.stderr
    run_id = started_run_id(res.stdout)

    def training() -> bool:
        _, st = status_json(state_dir, run_id)
        return all(t["state"] == "running" for t in st["tasks"])

    wait_for(training, 60, "every task running")

    def snapshot() -> dict[str, Any]:
        out = cli(state_dir, "dash", run_id, "--once", "--json", "--interval", str(INTERVAL), timeout=90)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def healthy() -> dict[str, Any] | None:
        snap = snapshot()
        tasks = {t["name"]: t for t in snap["tasks"]}
        ps = {p["name"]: p for p in snap["ps"]}
        ok = (all(tasks[w]["state"] == "running" and (tasks[w]["steps_per_s"] or 0) > 0
                  for w in ("worker:0", "worker:1"))
              and tasks["ps:0"]["state"] == "running"
              and (ps["ps:0"]["measured_in_Bps"] or 0) > 0 and (ps["ps:0"]["measured_out_Bps"] or 0) > 0)
        return snap if ok else None

    snap = wait_for(healthy, 180, "dash --once --json to show a training cluster", interval=1.0)
    ps0 = next(p for p in snap["ps"] if p["name"] == "ps:0")
    assert ps0["host"] == "m0" and ps0["peers"], ps0
    assert (ps0["accounted_in_Bps"] or 0) > 0 and (ps0["accounted_out_Bps"] or 0) > 0
    assert snap["totals"]["counts"]["running"] == 3 and snap["totals"]["global_step"] > 0
    assert all(h["reachable"] for h in snap["hosts"])

    # A SIGKILLed worker: the collector must show it exited or restarting within 3 intervals.
    collector = Collector.for_record(runs.load(run_id), INTERVAL).start()
    try:
        st = collector.wait_for_data(2, timeout=60)
        pid = st.tasks["worker:1"].pid
        assert pid is not None and st.tasks["worker:1"].state == "running"
        os.kill(pid, signal.SIGKILL)  # every loopback machine shares this kernel
        killed = time.monotonic()
        seen = None
        while time.monotonic() - killed < 10 * INTERVAL:
            live = collector.poll().tasks["worker:1"].state
            if live in ("exited", "restarting"):
                seen = time.monotonic() - killed
                break
            time.sleep(0.05)
        assert seen is not None, state_json(collector.poll())
        assert seen <= 3 * INTERVAL, f"took {seen:.2f}s"
        # ... and it comes back (the supervisor restarts it) with the restart counted
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            tv = collector.poll().tasks["worker:1"]
            if tv.state == "running" and tv.restarts == 1:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(state_json(collector.poll()))
        kinds = [e.kind for e in collector.state.log]
        assert "restart" in kinds and "recover" in kinds  # the supervisor goes straight to restarting
        assert any("restarting after exit code -9" in e.text for e in collector.state.log)
    finally:
        collector.close()
