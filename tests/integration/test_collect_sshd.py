"""The collector over real SSH (no TF): agents stream from 2 loopback machines behind real sshd; when one
machine dies (its sshd and sessions killed) its tasks turn `unreachable` with their last values kept,
the collector keeps retrying with backoff, and when the machine is back so is the stream."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from orchestrator.config.load import load_config
from orchestrator.monitor.collect import Collector
from orchestrator.monitor.reducer import ClusterState
from orchestrator.plan.from_file import plan_config
from testkit.sshd import Machines
from tests.helpers.collecting import state_when
from training.run.layout import HOST_PACKAGE
from training.telemetry.schema import dumps, make_event

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
ROOT = Path(__file__).resolve().parents[2]
INTERVAL = 0.5


def test_machine_dies_and_comes_back(machines: Machines, tmp_path: Path) -> None:
    plan = plan_config(load_config(machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps"], ["worker"]])))
    run_id = f"collect-sshd-{int(time.time())}"
    run_dirs: dict[str, str] = {}
    for i, host in enumerate(plan.hosts):
        d = Path(machines.workdir(i)) / "runs" / run_id / host.name
        for sub in ("code", "lib", "events", "logs", "state"):
            (d / sub).mkdir(parents=True)
        (d / "lib" / HOST_PACKAGE).symlink_to(ROOT / "training")
        run_dirs[host.name] = str(d)
    stop = threading.Event()

    def write() -> None:  # what the worker and the supervisors would append
        w = next(t for t in plan.tasks if t.job == "worker")
        for t in plan.tasks:
            with open(Path(run_dirs[t.host]) / "events" / f"supervisor-{t.host}.jsonl", "a") as f:
                f.write(dumps(make_event("task_state", t.host, job=t.job, task=t.index, state="running", pid=1)) + "\n")
        step = 0
        while not stop.is_set():
            step += 1
            with open(Path(run_dirs[w.host]) / "events" / f"{w.name}.jsonl", "a") as f:
                f.write(dumps(make_event("progress", w.host, job="worker", task=w.index, local_step=step,
                                         global_step=step, examples=step * 8, loss=1.0, interval_s=INTERVAL)) + "\n")
            stop.wait(INTERVAL)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    collector = Collector(ClusterState.from_plan(plan, run_id, INTERVAL), list(plan.hosts), run_dirs,
                          {h.name: h.python for h in plan.hosts}, INTERVAL).start()
    try:
        state_when(collector, lambda s: s.tasks["worker:0"].state == "running"
                   and s.tasks["ps:0"].state == "running", 30, "both machines streaming")
        rate = collector.state.tasks["worker:0"].steps_per_s
        machines.stop(1)  # m1 dies: its sshd, the SSH session and the agent under it
        lost_at = time.monotonic()
        state_when(collector, lambda s: s.tasks["worker:0"].state == "unreachable", 10, "m1 unreachable")
        took = time.monotonic() - lost_at
        assert took <= 3 * INTERVAL + 1.0, took  # 3 intervals after the last line, plus polling slack
        assert collector.state.tasks["worker:0"].steps_per_s == rate  # last value kept
        assert collector.state.tasks["ps:0"].state == "running"  # the other machine is unaffected
        assert any(e.kind == "host-lost" and "m1" in e.text for e in collector.state.log)
        # A reconnect attempt fails (connection refused): the task stays unreachable meanwhile.
        st = state_when(collector, lambda s: "refused" in s.hosts["m1"].stream_reason, 30, "a refused reconnect to m1")
        assert st.tasks["worker:0"].state == "unreachable"
        machines.start(1)
        state_when(collector, lambda s: s.tasks["worker:0"].state == "running", 40, "m1 back")
        assert any(e.kind == "host-back" and "m1" in e.text for e in collector.state.log)
        stream = next(s for s in collector.streams if s.host.name == "m1")
        assert stream.connects >= 2
    finally:
        stop.set()
        if not machines.is_running(1):
            machines.start(1)
        t0 = time.monotonic()
        collector.close()
        assert time.monotonic() - t0 < 15
