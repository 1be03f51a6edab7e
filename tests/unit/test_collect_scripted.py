"""The collector (orchestrator/monitor/collect.py) over scripted agent streams: lines reach the state,
a lost stream marks its host down and is reopened, a host that refuses stays unreachable until it is
back, and logs and signals go over their own connection. Scripted hosts stand in for many real agents
(their lines are made by the real telemetry schema); tests/integration/test_collect_sshd.py streams
from real agents over real sshd."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.monitor.collect import Collector
from orchestrator.run import launch
from orchestrator.run import records as runs
from testkit.scripted_transport import ScriptedCluster
from tests.helpers.collecting import state_when
from tests.plans import tiny_plan

INTERVAL = 0.05




@pytest.fixture
def cluster() -> ScriptedCluster:
    return ScriptedCluster()


@pytest.fixture
def record(tmp_path: Path, cluster: ScriptedCluster) -> runs.RunRecord:
    plan = tiny_plan([("ps",), ("worker",), ("worker",)], transport="ssh", training={"command": "sleep 60"})
    opts = launch.StartOptions(timeout=20, op_timeout=5, run_name="watched")
    return launch.start(plan, str(tmp_path / "hosts.toml"), opts, opener=cluster.opener).record


@pytest.fixture
def collector(record: runs.RunRecord, cluster: ScriptedCluster) -> Iterator[Collector]:
    c = Collector.for_record(record, interval=INTERVAL, opener=cluster.opener).start()
    try:
        yield c
    finally:
        c.close()


def test_agent_lines_reach_the_state(collector: Collector) -> None:
    st = collector.wait_for_data(heartbeats=3, timeout=10)
    assert all(h.reachable and h.stream_up and h.cpu_pct == 12.5 for h in st.hosts.values())
    assert {name: t.process_state for name, t in st.tasks.items()} == {
        "ps:0": "running", "worker:0": "running", "worker:1": "running"}
    assert st.malformed == 0


def test_a_lost_stream_is_reopened(collector: Collector, cluster: ScriptedCluster) -> None:
    collector.wait_for_data(heartbeats=2, timeout=10)
    m1 = cluster.host("m1")
    m1.fail("agent", "lost", after=True)
    state_when(collector, lambda st: not st.hosts["m1"].stream_up and "lost" in st.hosts["m1"].stream_reason, 10,
               "m1's stream lost")
    state_when(collector, lambda st: st.hosts["m1"].stream_up, 10, "m1 reconnected after its backoff")
    assert m1.steps.count("agent") == 2 and m1.connects >= 2


def test_a_host_that_goes_down_is_unreachable_until_it_is_back(collector: Collector, cluster: ScriptedCluster) -> None:
    collector.wait_for_data(heartbeats=2, timeout=10)
    m2 = cluster.host("m2")
    m2.down = True
    m2.fail("agent", "lost", after=True)
    st = state_when(collector, lambda st: not st.hosts["m2"].reachable, 10, "m2 unreachable")
    assert st.tasks["worker:1"].state == "unreachable" and st.hosts["m0"].reachable
    assert "refused" in st.hosts["m2"].stream_reason or "lost" in st.hosts["m2"].stream_reason
    m2.down = False
    st = state_when(collector, lambda st: st.hosts["m2"].reachable and st.hosts["m2"].stream_up, 15, "m2 back")
    assert any("host m2 back" in entry.text for entry in st.log)


def test_logs_and_signals_use_their_own_connection(collector: Collector, cluster: ScriptedCluster) -> None:
    st = collector.wait_for_data(heartbeats=1, timeout=10)
    assert collector.task_log("worker", 0) == ["hello from worker:0"]
    pid = st.tasks["worker:0"].pid
    assert pid is not None
    said = collector.signal_task("worker", 0, "TERM")
    assert said == f"worker:0 (pid {pid} on m1): sent SIGTERM"
    task = next(iter(cluster.host("m1").runs.values())).tasks["worker-0"]
    assert task.restarts == 1 and task.pid != pid  # the supervisor started it again
    assert cluster.host("m1").steps.count("agent") == 1  # the stream was not disturbed


def test_close_is_safe_when_start_was_cut_short(record: runs.RunRecord, cluster: ScriptedCluster) -> None:
    """A Ctrl-C can land in `start()` (bench's cell, the dashboard) before every stream thread began; the
    caller's `close()` must still end what did start, not raise (CI: "cannot join thread before it is
    started", which turned bench's Ctrl-C exit 130 into a traceback)."""
    never_started = Collector.for_record(record, interval=INTERVAL, opener=cluster.opener)
    never_started.close()
    half = Collector.for_record(record, interval=INTERVAL, opener=cluster.opener)
    half.streams[0].start()  # as if the interrupt came after the first thread
    half.close()
    assert not half.streams[0].is_alive()
