"""ClusterState reducer: liveness transitions, rates, PS traffic, totals, log. Synthetic events, fake clock."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from orchestrator.monitor.events import (
    EventParser,
    HeartbeatEvent,
    ProgressEvent,
    PsBytes,
    StreamDown,
    StreamUp,
)
from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.state_json import state_json
from orchestrator.monitor.task_state import TaskState
from orchestrator.monitor.views import ema, host_reachable, task_liveness, window_buckets
from tests.helpers.state_events import T0, feed, hb, progress, task_state
from training.telemetry.schema import make_event


def healthy(st: ClusterState, seconds: int, start: float = T0, step0: int = 0) -> float:
    """One heartbeat and one progress a second; returns the last time."""
    t = start
    for i in range(seconds):
        t = start + i
        feed(st, hb("a", t))
        feed(st, progress(t, step0 + 5 * i))
    return t


def test_ema_first_value_then_smooths_by_time_constant() -> None:
    assert ema(None, 10.0, 1.0) == 10.0
    assert ema(10.0, 20.0, 1.0, tau=3.0) == pytest.approx(10 + (1 - math.exp(-1 / 3)) * 10)
    assert ema(10.0, 20.0, 0.0) == 10.0


def test_steps_and_examples_rates_from_cumulative_counters() -> None:
    st = ClusterState(now=T0)
    t = healthy(st, 10)
    st.tick(t)
    tv = st.tasks["worker:0"]
    assert tv.steps_per_s == pytest.approx(5.0)
    assert tv.examples_per_s == pytest.approx(50.0)
    assert tv.state == "running"
    assert st.examples_per_s == pytest.approx(50.0)
    assert st.global_step == 45


def test_rate_is_smoothed_when_speed_changes() -> None:
    st = ClusterState(now=T0)
    t = healthy(st, 5)  # 5 steps/s, last local step 20
    feed(st, hb("a", t + 1))
    feed(st, progress(t + 1, 20 + 15))  # a 15 steps/s second
    st.tick(t + 1)
    assert 5.0 < (st.tasks["worker:0"].steps_per_s or 0) < 15.0
    assert st.tracks["worker:0"].history[-1][1] == pytest.approx(15.0)  # the sparkline keeps the raw value


def test_restarted_process_counters_reset_rate() -> None:
    st = ClusterState(now=T0)
    t = healthy(st, 5)
    feed(st, progress(t + 1, 3))  # local_step went backwards: a new process
    st.tick(t + 1)
    assert st.tasks["worker:0"].steps_per_s is None
    feed(st, progress(t + 2, 8))
    st.tick(t + 2)
    assert st.tasks["worker:0"].steps_per_s == pytest.approx(5.0)


def test_running_to_stalled_when_progress_stops() -> None:
    st = ClusterState(now=T0)
    t = healthy(st, 5)
    st.tick(t + 3)
    assert st.tasks["worker:0"].state == "running"  # exactly 3 intervals: still current
    feed(st, hb("a", t + 3.5))
    st.tick(t + 3.5)
    assert st.tasks["worker:0"].state == "stalled"
    assert st.tasks["worker:0"].age_s == pytest.approx(3.5)
    assert any(e.kind == "stall" for e in st.log)


def test_stalled_when_progress_arrives_but_global_step_does_not_move() -> None:
    st = ClusterState(now=T0)
    for i in range(8):
        feed(st, hb("a", T0 + i))
        feed(st, progress(T0 + i, 5 * i, gstep=100))
    st.tick(T0 + 7)
    assert st.tasks["worker:0"].state == "stalled"


def test_stalled_back_to_running() -> None:
    st = ClusterState(now=T0)
    t = healthy(st, 3)
    feed(st, hb("a", t + 5))
    st.tick(t + 5)
    assert st.tasks["worker:0"].state == "stalled"
    feed(st, progress(t + 6, 100))
    feed(st, hb("a", t + 6))
    st.tick(t + 6)
    assert st.tasks["worker:0"].state == "running"


def test_exited_then_restarting_then_starting_then_running() -> None:
    st = ClusterState(now=T0)
    t = healthy(st, 3)
    feed(st, task_state(t + 0.5, "exited", pid=11, exit_code=-9, restarts=0))
    st.tick(t + 0.5)
    tv = st.tasks["worker:0"]
    assert (tv.state, tv.exit_code, tv.steps_per_s) == ("exited", -9, None)
    feed(st, task_state(t + 1, "restarting", restarts=1))
    st.tick(t + 1)
    tv = st.tasks["worker:0"]
    assert tv.state == "restarting" and tv.restarts == 1
    assert tv.steps_per_s is None and tv.examples_per_s is None  # not the dead process's rates
    feed(st, hb("a", t + 2))
    feed(st, task_state(t + 2, "running", pid=12, restarts=1))
    st.tick(t + 2)
    tv = st.tasks["worker:0"]
    assert tv.state == "starting"  # no progress from the new process yet
    assert tv.exit_code is None and tv.pid == 12 and tv.steps_per_s is None
    feed(st, progress(t + 3, 0, gstep=20))
    feed(st, progress(t + 4, 5, gstep=25))
    feed(st, hb("a", t + 4))
    st.tick(t + 4)
    tv = st.tasks["worker:0"]
    assert tv.state == "running" and tv.steps_per_s == pytest.approx(5.0)
    kinds = [e.kind for e in st.log]
    assert kinds == ["exit", "restart", "recover"]


def test_progress_newer_than_restarting_means_running() -> None:
    st = ClusterState(now=T0)
    feed(st, hb("a", T0))
    feed(st, task_state(T0, "restarting", restarts=2))
    feed(st, progress(T0 + 1, 1))
    feed(st, progress(T0 + 2, 6))
    st.tick(T0 + 2)
    assert st.tasks["worker:0"].state == "running"


def test_exited_wins_over_older_progress_and_stale_task_state_is_ignored() -> None:
    st = ClusterState(now=T0)
    t = healthy(st, 3)
    feed(st, task_state(t + 1, "exited", exit_code=0))
    feed(st, task_state(t - 1, "running"))  # replayed older line
    st.tick(t + 1)
    assert st.tasks["worker:0"].state == "exited"


def test_ps_task_is_running_on_supervisor_word_without_progress() -> None:
    st = ClusterState(now=T0)
    feed(st, hb("p", T0))
    feed(st, task_state(T0, "running", job="ps", task=0, host="p", pid=5))
    st.tick(T0 + 1)
    assert st.tasks["ps:0"].state == "running"


def test_host_unreachable_after_three_intervals_values_kept_then_back() -> None:
    st = ClusterState(now=T0)
    t = healthy(st, 5)
    st.apply(StreamDown(t + 0.1, "a", "connection reset"), t + 0.1)
    st.tick(t + 3)
    assert st.tasks["worker:0"].state == "running"
    st.tick(t + 3.01)
    tv = st.tasks["worker:0"]
    assert tv.state == "unreachable"
    assert tv.steps_per_s == pytest.approx(5.0)  # last values stay visible
    assert tv.age_s == pytest.approx(3.01)
    assert st.counts["unreachable"] == 1
    assert st.log[-1].kind == "host-lost" and "connection reset" in st.log[-1].text
    st.apply(StreamUp(t + 5, "a"), t + 5)
    feed(st, hb("a", t + 5))
    feed(st, progress(t + 5, 100))
    feed(st, progress(t + 6, 105))
    st.tick(t + 6)
    assert st.tasks["worker:0"].state == "running"
    assert st.log[-1].kind == "host-back"


def test_never_heard_host_becomes_unreachable_from_when_it_was_known() -> None:
    st = ClusterState(now=T0)
    st.add_task("worker", 0, "silent")
    st.tick(T0 + 2)
    assert st.tasks["worker:0"].state == "starting"
    st.tick(T0 + 4)
    assert st.tasks["worker:0"].state == "unreachable"
    assert st.tasks["worker:0"].age_s is None


def test_pure_liveness_functions() -> None:
    st = ClusterState(now=T0)
    t = healthy(st, 4)
    tv, h = st.tracks["worker:0"], st.hosts["a"]
    assert host_reachable(h, t + 3) and not host_reachable(h, t + 3.5)
    assert task_liveness(tv, h, t) == "running"
    assert task_liveness(tv, h, t + 10) == "unreachable"
    assert tv.liveness == "starting" and st.tasks == {}  # the pure functions did not touch the state


def test_clock_offset_maps_remote_times() -> None:
    st = ClusterState(now=T0)
    skew = 100.0  # the host's clock is 100 s behind
    for i in range(4):
        st.apply(HeartbeatEvent(T0 + i - skew, "a", 1.0), T0 + i)
        feed(st, progress(T0 + i - skew, 5 * i), now=T0 + i)
    st.tick(T0 + 3)
    assert st.tasks["worker:0"].state == "running"
    assert st.tasks["worker:0"].age_s == pytest.approx(0.0)


def test_totals_counts_and_loss() -> None:
    st = ClusterState(now=T0)
    for i in range(3):
        t = T0 + i
        feed(st, hb("a", t))
        feed(st, progress(t, 2 * i, gstep=4 * i, task=0, loss=2.0))
        feed(st, progress(t, 2 * i, gstep=4 * i + 1, task=1, loss=4.0))
    feed(st, task_state(T0 + 2, "exited", task=2, exit_code=1))
    st.tick(T0 + 2)
    assert st.counts["running"] == 2 and st.counts["exited"] == 1
    assert st.global_step == 9
    assert st.loss == pytest.approx(3.0)
    assert st.steps_per_s == pytest.approx(4.0)


def test_window_buckets_for_sparklines() -> None:
    from collections import deque
    hist = deque([(T0 - 70, 9.0), (T0 - 55, 1.0), (T0 - 1, 3.0), (T0 - 0.5, 5.0)])
    vals = window_buckets(hist, T0, 6, 60.0)
    assert vals == [1.0, 0.0, 0.0, 0.0, 0.0, 4.0]
    assert window_buckets(hist, T0, 6, 60.0, fill_forward=True) == [1.0, 1.0, 1.0, 1.0, 1.0, 4.0]


def test_parser_counts_malformed_and_ignores_unknown() -> None:
    p = EventParser()
    assert p.parse("{not json") is None
    assert p.parse("[1,2]") is None
    assert p.parse(json.dumps({"kind": "progress", "t": 1, "host": "a"})) is None  # no job/task
    assert p.parse(json.dumps({"kind": "progress", "t": "x", "host": "a"})) is None
    assert p.malformed == 4
    assert p.parse(json.dumps({"kind": "future_kind", "t": 1, "host": "a"})) is None
    assert p.unknown == 1
    ev = p.parse(json.dumps({"v": 1, "kind": "heartbeat", "t": 1, "host": "a", "extra": {"x": 1}}))
    assert isinstance(ev, HeartbeatEvent) and ev.host == "a"
    assert p.parse("") is None and p.malformed == 4


def test_parser_reads_what_the_json_module_reads() -> None:
    """The parser's fast JSON decoder refuses what Python's json accepts (NaN, numbers beyond 64 bits,
    bytes that are not UTF-8, blank lines with spaces): those lines read as before, never malformed."""
    p = EventParser()
    line = '{"kind":"progress","t":1,"host":"a","job":"worker","task":0,"local_step":2,"loss":NaN}'
    ev = p.parse(line)
    assert isinstance(ev, ProgressEvent) and ev.loss is None and ev.local_step == 2
    big = '{"kind":"progress","t":1,"host":"a","job":"worker","task":0,"global_step":' + str(2**70) + "}"
    ev = p.parse(big.encode())
    assert isinstance(ev, ProgressEvent) and ev.global_step == 2**70
    ev = p.parse(b'{"kind":"heartbeat","t":1,"host":"a\xff"}')
    assert isinstance(ev, HeartbeatEvent) and ev.host == "a\ufffd"
    assert p.parse("   \n") is None and p.parse(b"") is None
    stored = '{"kind":"progress","t":1,"host":"a","job":"worker","task":0,"ps_bytes":{"ps-1":[3,4],"0":[1,2]}}'
    ev = p.parse(stored)
    assert isinstance(ev, ProgressEvent) and ev.ps_bytes == {"ps:1": PsBytes(3, 4), "ps:0": PsBytes(1, 2)}
    assert p.malformed == 0 and p.unknown == 0


def test_to_json_is_serialisable() -> None:
    st = ClusterState(run_id="r1", now=T0)
    healthy(st, 3)
    st.tick(T0 + 2)
    out = json.loads(json.dumps(state_json(st)))
    assert out["tasks"][0]["name"] == "worker:0" and out["tasks"][0]["state"] == "running"
    assert out["totals"]["counts"]["running"] == 1 and out["state"] == "running" and out["failed"] is False


def test_supervisor_sequence_restarting_starting_running_with_signal() -> None:
    """What training/supervisor/core.py writes for a SIGKILLed task: restarting (signal 9), starting, running."""
    st = ClusterState(now=T0)
    t = healthy(st, 3)
    feed(st, task_state(t + 0.2, "restarting", pid=11, exit_code=None, signal=9, restarts=1))
    st.tick(t + 0.2)
    tv = st.tasks["worker:0"]
    assert (tv.state, tv.exit_code, tv.restarts, tv.steps_per_s) == ("restarting", -9, 1, None)
    feed(st, task_state(t + 1.2, "starting", pid=11, restarts=1))
    feed(st, hb("a", t + 1.3))
    feed(st, task_state(t + 1.3, "running", pid=12, restarts=1))
    st.tick(t + 1.3)
    tv = st.tasks["worker:0"]
    assert tv.state == "starting" and tv.pid == 12
    assert [e.text for e in st.log] == ["worker:0 on a restarting after exit code -9 (restart 1)",
                                        "worker:0 on a running again (pid 12)"]


def test_host_never_heard_is_not_reported_lost_but_not_reachable_yet() -> None:
    st = ClusterState(now=T0)
    st.add_task("worker", 0, "late")
    st.tick(T0 + 4)
    assert st.log[-1].text == "host late not reachable yet"
    feed(st, hb("late", T0 + 5))
    st.tick(T0 + 5)
    assert st.log[-1].kind == "host-back"


def sample(t: float, host: str = "a", supervisor_alive: bool | None = True, **tasks: dict) -> dict:
    return make_event("host_sample", host, t=t, cpu_pct=10.0, mem_pct=10.0, gpus=[], ps_tcp={},
                      tasks=tasks, supervisor={"pid": 1, "alive": supervisor_alive})


def facts(cpu_s: float, procs: int = 1, stopped: bool = False, moved_at: float | None = None,
          listening_since: float | None = None) -> dict:
    return {"procs": procs, "cpu_s": cpu_s, "stopped": stopped, "cpu_moved_at": moved_at,
            "listening_since": listening_since}


def test_a_task_whose_supervisor_and_processes_are_gone_is_lost_and_logged_once() -> None:
    st = ClusterState(now=T0)
    t = healthy(st, 5)
    feed(st, sample(t, **{"worker-0": facts(1.0)}))
    st.tick(t)
    assert st.tasks["worker:0"].state == "running"
    for i in range(1, 6):  # the supervisor dies, then its worker; the state file still says running
        feed(st, hb("a", t + i))
        feed(st, sample(t + i, supervisor_alive=False, **{"worker-0": facts(1.0, procs=0 if i > 2 else 1)}))
        st.tick(t + i)
    assert st.tasks["worker:0"].state == "lost"
    assert [e.kind for e in st.log].count("lost") == 1


def test_a_program_that_reports_nothing_is_judged_by_its_cpu() -> None:
    st = ClusterState(now=T0)
    st.add_task("worker", 0, "a", reports="maybe")  # a user's command
    feed(st, hb("a", T0))
    feed(st, task_state(T0, "running", pid=10))
    feed(st, sample(T0, **{"worker-0": facts(0.0)}))
    st.tick(T0)
    assert st.tasks["worker:0"].state == "running"  # just started: the benefit of the doubt for one window
    for i in range(1, 6):  # busy
        feed(st, hb("a", T0 + i))
        feed(st, sample(T0 + i, **{"worker-0": facts(0.5 + i, moved_at=T0 + i)}))
        st.tick(T0 + i)
    assert st.tasks["worker:0"].state == "running" and st.tasks["worker:0"].no_progress_reported
    for i in range(6, 12):  # alive but its CPU stopped moving
        feed(st, hb("a", T0 + i))
        feed(st, sample(T0 + i, **{"worker-0": facts(5.5, moved_at=T0 + 5)}))
        st.tick(T0 + i)
    assert st.tasks["worker:0"].state == "stalled" and st.tasks["worker:0"].no_progress_reported
    feed(st, sample(T0 + 12, **{"worker-0": facts(9.0, stopped=True, moved_at=T0 + 12)}))
    st.tick(T0 + 12)
    assert st.tasks["worker:0"].state == "stalled"  # SIGSTOPped: going nowhere even if the counter moved


def test_servers_are_running_while_they_live() -> None:
    st = ClusterState(now=T0)
    st.add_task("worker", 0, "a", reports="no")  # an in-graph worker: a TF server, no progress of its own
    feed(st, hb("a", T0))
    feed(st, task_state(T0, "running", pid=10))
    feed(st, sample(T0, **{"worker-0": facts(0.1)}))
    st.tick(T0 + 30)
    feed(st, hb("a", T0 + 30))
    st.tick(T0 + 30)
    assert st.tasks["worker:0"].state == "running"


def test_the_log_stays_in_time_order_and_a_replayed_backlog_logs_no_false_stall() -> None:
    st = ClusterState(now=T0 + 100)
    feed(st, {"kind": "stream_up"} | hb("a", T0 + 100))  # (a heartbeat; the StreamUp is applied below)
    st.apply(StreamUp(T0 + 100, "a"), T0 + 100)
    for i in range(5):  # the backlog: progress from a minute ago, then a restart, arriving now
        feed(st, progress(T0 + 40 + i, 5 * i), now=T0 + 100)
    feed(st, task_state(T0 + 50, "restarting", restarts=1, exit_code=1), now=T0 + 100)
    st.tick(T0 + 100)
    st._log(T0 + 99, "info", "earlier")  # an entry older than the last one goes before it
    assert [e.t for e in st.log] == sorted(e.t for e in st.log)
    assert "stall" not in [e.kind for e in st.log]
def test_task_stopped_for_good_is_exited_held_and_logged_as_the_users_choice() -> None:
    st = ClusterState(now=T0)
    t = healthy(st, 5)
    feed(st, task_state(t + 0.5, "exited", pid=42, signal=15, final=True, stopped_by="user"))
    feed(st, task_state(t + 0.5, "exited", job="worker", task=1, pid=43, exit_code=3, final=True))
    st.tick(t + 1)
    held, failed = st.tasks["worker:0"], st.tasks["worker:1"]
    assert (held.state, held.exit_code, held.held) == ("exited", -15, True)
    assert (failed.state, failed.held) == ("exited", False)
    texts = [e.text for e in st.log]
    assert "worker:0 on a exited (code -15, stopped for good by the user)" in texts
    assert "worker:1 on a exited (code 3)" in texts
    out = {t["name"]: t for t in json.loads(json.dumps(state_json(st)))["tasks"]}
    assert out["worker:0"]["held"] is True and out["worker:1"]["held"] is False



def test_a_snapshot_is_a_whole_frozen_task_state() -> None:  # (built by TaskState.of, not its __init__)
    st = ClusterState(now=T0)
    st.tick(healthy(st, 3))
    snap = st.tasks["worker:0"]
    assert set(vars(snap)) == {f.name for f in dataclasses.fields(TaskState)} and snap == TaskState(**vars(snap))
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.pid = 1  # type: ignore[misc]
