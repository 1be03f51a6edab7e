"""A live source follows a resize (orchestrator/monitor/reshape.py, issue 37): the reducer drops a task and a
host without a trace of `lost`; a saved record is diffed by task name (a moved worker is dropped where it was
and added where it goes); the record is read again only when its file changed; and a Collector opened on a
run before a grow and a shrink streams from the host that joined and drops the one that left.

The collector's hosts are testkit's scripted transport (ScriptedCluster), a fake only at the stream seam:
a real agent per host needs real hosts, which tests/integration/test_reshape_sshd.py has over sshd. The
record files, the diff, the reducer and the collector's threads are the real ones."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.monitor.collect import Collector
from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.reshape import RecordWatch, Reshape
from orchestrator.plan.model import ClusterPlan
from orchestrator.plan.resize_diff import plan_resize
from orchestrator.plan.without_worker import plan_without
from orchestrator.run import launch
from orchestrator.run import records as runs
from testkit.scripted_transport import ScriptedCluster
from tests.helpers.collecting import state_when
from tests.helpers.state_events import T0, feed, hb, progress, task_state
from tests.helpers.waiting import wait_for
from tests.plans import tiny_plan

INTERVAL = 0.05
FOUR: list[tuple[str, ...]] = [("ps",), ("worker",), ("worker",), ("worker",)]  # m0 .. m3
PROGRAM = {"command": "sleep 60"}


def _plan(roles: list[tuple[str, ...]]) -> ClusterPlan:
    return tiny_plan(roles, transport="ssh", training=PROGRAM)


def _record(plan: ClusterPlan, run_id: str = "reshaped") -> runs.RunRecord:
    return runs.RunRecord(run_id, "hosts.toml", "demo", plan.mode, T0, plan,
                          [runs.HostRecord(h.name, h.workdir, f"/runs/{h.name}") for h in plan.hosts], status="started")


def _resized(record: runs.RunRecord, roles: list[tuple[str, ...]], *, hosts: list[runs.HostRecord] | None = None,
             save: bool = True) -> runs.RunRecord:
    """The record as `tfcluster resize` leaves it (orchestrator/run/resize.py step 5): the plan the resize's
    diff makes (ports kept), the plan's hosts, one more history entry."""
    change = plan_resize(record.plan, _plan(roles))
    new = dataclasses.replace(record, resizes=list(record.resizes), notes=list(record.notes))
    new.replace_plan(change.new)
    known = {h.name: h for h in [*(hosts or []), *record.hosts]}
    new.hosts = [known.get(h.name) or runs.HostRecord(h.name, h.workdir, f"/runs/{h.name}") for h in change.new.hosts]
    new.resizes.append({"at": time.time(), **change.summary(), "lines": change.lines()})
    if save:
        runs.save(new)
    return new


# -- the reducer ------------------------------------------------------------------------------------------


def test_a_dropped_task_loses_its_row_its_graph_line_and_its_traffic() -> None:
    st = ClusterState.from_plan(_plan(FOUR[:3]), "r", 1.0, now=T0)
    for i, t in enumerate((T0, T0 + 1)):
        feed(st, hb("m2", t))
        feed(st, progress(t, 10 * (i + 1), task=1, host="m2", ps_bytes={"ps-0": {"pulled": 800, "pushed": 200}}))
    st.tick(T0 + 1)
    assert "worker:1" in st.history.tasks and "worker:1" in st.ps["ps:0"]._by_worker

    st.drop_task("worker:1")
    st.tick(T0 + 60)  # long after: a task still tracked would be unreachable, its host lost
    assert set(st.tasks) == {"ps:0", "worker:0"} and sum(st.counts.values()) == 2
    assert "worker:1" not in st.history.tasks and "worker:1" not in st.ps["ps:0"]._by_worker
    assert not any("worker:1" in e.text for e in st.log)


def test_a_dropped_host_takes_its_tasks_and_graphs_and_is_never_lost() -> None:
    st = ClusterState.from_plan(_plan(FOUR[:3]), "r", 1.0, now=T0)
    for t in (T0, T0 + 1):
        for host in ("m0", "m1", "m2"):
            feed(st, hb(host, t))
        feed(st, progress(t, int(t - T0) * 10 + 10, task=1, host="m2"))
    st.tick(T0 + 1)
    assert "m2" in st.history.hosts

    st.drop_host("m2")
    st.tick(T0 + 2)
    assert set(st.hosts) == {"m0", "m1"} and set(st.tasks) == {"ps:0", "worker:0"}
    assert "m2" not in st.history.hosts
    st.tick(T0 + 60)
    assert not any("m2" in e.text for e in st.log)


def test_a_planned_task_gets_its_planned_facts_even_after_its_first_events() -> None:
    """A new host's task may be heard of before the record's save (from a read of the host): its events
    made a row with the default guess of a worker (it reports progress); the plan says a user's program."""
    st = ClusterState.from_plan(_plan(FOUR[:3]), "r", 1.0, now=T0)
    feed(st, task_state(T0, "running", task=2, host="m3", pid=42))
    early = st.tracks["worker:2"]
    assert early.reports == "yes"
    grown = plan_resize(_plan(FOUR[:3]), _plan(FOUR)).new
    assert st.add_planned(grown, grown.task("worker", 2)) is early  # the same row: its pid is kept
    assert st.tracks["worker:2"].reports == "maybe" and st.tracks["worker:2"].pid == 42


# -- the diff and the watch -------------------------------------------------------------------------------


def test_a_grow_a_shrink_and_a_move_are_diffed_by_task_name() -> None:
    three = _record(_plan(FOUR[:3]))
    grown = _resized(three, FOUR, save=False)
    change = Reshape.between(three, grown)
    assert [h.name for h in change.hosts_added] == ["m3"] and change.hosts_removed == ()
    assert [t.name for t in change.tasks_added] == ["worker:2"] and change.tasks_removed == ()
    assert change.resizes_said == 0

    back = Reshape.between(grown, _resized(grown, FOUR[:3], save=False))
    assert back.hosts_added == () and back.hosts_removed == ("m3",)
    assert back.tasks_added == () and back.tasks_removed == ("worker:2",) and back.resizes_said == 1

    # worker:1 (m2) removed: worker:2 takes its index where it runs, m3; m2 leaves
    moved = dataclasses.replace(grown, resizes=[*grown.resizes, {"at": T0, "lines": ["moved"]}])
    moved.replace_plan(plan_resize(grown.plan, plan_without(grown.plan, "worker:1")).new)
    change = Reshape.between(grown, moved)
    assert change.hosts_removed == ("m2",) and change.hosts_added == ()
    assert set(change.tasks_removed) == {"worker:1", "worker:2"}
    assert [(t.name, t.host) for t in change.tasks_added] == [("worker:1", "m3")]

    st = ClusterState.from_plan(grown.plan, "r", 1.0, now=T0)
    change.apply(st)
    st.tick(T0 + 1)
    assert {n: t.host for n, t in st.tasks.items()} == {"ps:0": "m0", "worker:0": "m1", "worker:1": "m3"}
    assert set(st.hosts) == {"m0", "m1", "m3"} and [e.text for e in st.log] == ["resize: moved"]


def test_the_record_is_read_again_only_when_its_file_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    record = _record(_plan(FOUR[:3]))
    runs.save(record)
    reads: list[Path] = []
    real_read = runs.read

    def counted(path: Path) -> runs.RunRecord:  # a spy: the real read, counted
        reads.append(path)
        return real_read(path)

    monkeypatch.setattr(runs, "read", counted)
    watch = RecordWatch(record)
    first = watch.changed()  # read once at first: a resize saved while the source was built is not missed
    assert first is not None and first.tasks_added == () and first.tasks_removed == () and len(reads) == 1
    assert all(watch.changed() is None for _ in range(100)) and len(reads) == 1

    grown = _resized(record, FOUR)
    change = watch.changed()
    assert change is not None and [t.name for t in change.tasks_added] == ["worker:2"] and len(reads) == 2
    assert watch.changed() is None and watch.record.plan.hosts[-1].name == "m3"

    runs.record_path(record.run_id).write_text("{not json")  # damaged: the shape followed stands
    assert watch.changed() is None and len(watch.record.plan.tasks) == 4
    runs.remove(record.run_id)  # purged: nothing more to follow
    assert watch.changed() is None
    runs.save(grown)
    assert watch.changed() is not None  # the same shape saved again: read, nothing to change
    assert watch.changed() is None


# -- a live collector --------------------------------------------------------------------------------------


@pytest.fixture
def cluster() -> ScriptedCluster:
    return ScriptedCluster()


@pytest.fixture
def four(tmp_path: Path, cluster: ScriptedCluster) -> runs.RunRecord:
    """A run of the four scripted hosts, every task running (m3's worker:2 too)."""
    opts = launch.StartOptions(timeout=20, op_timeout=5, run_name="reshaped")
    return launch.start(_plan(FOUR), str(tmp_path / "hosts.toml"), opts, opener=cluster.opener).record


@pytest.fixture
def three(four: runs.RunRecord) -> runs.RunRecord:
    """Its record as if it had started on m0..m2: m3 runs, but is no host of the run (yet)."""
    shape = plan_resize(four.plan, _plan(FOUR[:3])).new
    record = dataclasses.replace(four, hosts=four.hosts[:3], resizes=[], notes=[])
    record.replace_plan(shape)
    runs.save(record)
    return record


@pytest.fixture
def collector(three: runs.RunRecord, cluster: ScriptedCluster) -> Iterator[Collector]:
    c = Collector.for_record(runs.load(three.run_id), interval=INTERVAL, opener=cluster.opener).start()
    try:
        yield c
    finally:
        c.close()


def test_a_collector_open_before_a_grow_and_a_shrink_follows_both(collector: Collector, three: runs.RunRecord,
                                                                  four: runs.RunRecord,
                                                                  cluster: ScriptedCluster) -> None:
    st = collector.wait_for_data(heartbeats=2, timeout=10)
    assert set(st.tasks) == {"ps:0", "worker:0", "worker:1"} and set(st.hosts) == {"m0", "m1", "m2"}
    assert "agent" not in cluster.host("m3").steps  # m3 is not watched

    grown = _resized(three, FOUR, hosts=four.hosts)
    st = state_when(collector, lambda s: "worker:2" in s.tasks and s.tasks["worker:2"].process_state == "running"
                    and s.hosts["m3"].stream_up, 10, "worker:2 running on m3, m3's stream up")
    assert st.tasks["worker:2"].host == "m3" and st.tracks["worker:2"].reports == "maybe"  # as from_plan says
    assert any(e.text == "resize: host m3 joins; worker:2 starts on m3" for e in st.log)
    assert collector.task_log("worker", 2) == ["hello from worker:2"]  # logs reach the new host
    joined = next(s for s in collector.streams if s.host.name == "m3")

    _resized(grown, FOUR[:3])
    st = state_when(collector, lambda s: "worker:2" not in s.tasks, 10, "worker:2's row gone")
    assert set(st.hosts) == {"m0", "m1", "m2"} and joined not in collector.streams
    assert any(e.text == "resize: worker:2 on m3 is stopped; host m3 leaves" for e in st.log)
    wait_for(lambda: not joined.is_alive(), 10, "m3's stream thread ended (retired, not reconnecting)")
    heard = cluster.host("m3").steps.count("agent")
    st = collector.poll()  # m3's scripted agent would stream on: nothing of it comes back
    assert "m3" not in st.hosts and "worker:2" not in st.tasks and cluster.host("m3").steps.count("agent") == heard
    assert not any(e.kind in ("lost", "host-lost") for e in st.log), [e.text for e in st.log]
    assert st.run_state == "running"
