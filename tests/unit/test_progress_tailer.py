"""FileFollower and LogProgressTailer on real files (and one real writer process), and the events they
write read back by the orchestrator's own parser and reducer."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.monitor.events import EventParser, ProgressEvent
from orchestrator.monitor.reducer import ClusterState
from tests.helpers.waiting import wait_for
from training.progress.follow import FileFollower
from training.progress.tailer import LogProgressTailer, close_tailers, log_progress_tailers, poll_tailers
from training.run.layout import RunLayout
from training.supervisor.children import Child, spawn

DATA = Path(__file__).parent / "data" / "progress"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


# -- FileFollower -------------------------------------------------------------------------------------

def test_follower_complete_segments_partial_waits_and_missing_file(tmp_path: Path) -> None:
    log = tmp_path / "t.log"
    f = FileFollower(str(log))
    assert f.read() == []  # no file yet
    append(log, b"one\ntw")
    assert f.read() == ["one"]
    append(log, "o\n\nthr\u00e9e\r".encode())
    assert f.read() == ["two", "thr\u00e9e"]
    assert f.read() == []


def test_follower_progress_bar_segment_is_peeked_once(tmp_path: Path) -> None:
    log = tmp_path / "t.log"
    f = FileFollower(str(log))
    append(log, b"Epoch 1/2\n\b\b\r 1/9 - loss: 1.0")
    assert f.read() == ["Epoch 1/2"]  # it may still grow
    assert f.read() == [" 1/9 - loss: 1.0"]  # did not grow for one read: returned as it is
    assert f.read() == []
    append(log, b"\b\b\b\r 2/9 - loss: 0.9")  # completes the first unchanged: not returned twice
    assert f.read() == []
    assert f.read() == [" 2/9 - loss: 0.9"]
    append(log, b"\nplain partial")
    assert f.read() == []  # the completion of a peeked segment with a newline: nothing new
    assert f.read() == []  # a segment after '\n' is never peeked


def test_follower_truncation_and_replacement_start_over(tmp_path: Path) -> None:
    log = tmp_path / "t.log"
    append(log, b"a\nb\n")
    f = FileFollower(str(log))
    assert f.read() == ["a", "b"]
    log.write_bytes(b"c\n")  # truncated and rewritten (shorter)
    assert f.read() == ["c"]
    os.unlink(log)
    log.write_bytes(b"d\ne\nf\n")  # a new file (new inode) under the same name
    assert f.read() == ["d", "e", "f"]
    f.close()


def test_follower_from_end_and_bounded_reads(tmp_path: Path) -> None:
    log = tmp_path / "t.log"
    append(log, b"old\n")
    f = FileFollower(str(log), from_end=True, max_read=6, max_backlog=24)
    append(log, b"0123\n5678\n")
    assert f.read() == ["0123"]  # 6 bytes per read at most
    assert f.read() == ["5678"]
    append(log, b"".join(b"line%04d\n" % i for i in range(100)))  # 900 bytes: far behind
    assert f.read() == []  # jumped to the last max_read bytes ("099\n"), dropping the cut first line
    assert f.skipped == 900 - 6
    append(log, b"next\n")
    assert f.read() == ["next"]


def test_follower_cuts_an_endless_segment(tmp_path: Path) -> None:
    log = tmp_path / "t.log"
    f = FileFollower(str(log), max_partial=100)
    append(log, b"x" * 250)
    assert f.read() == ["x" * 250]
    append(log, b"y\n")
    assert f.read() == ["y"]


# -- LogProgressTailer ----------------------------------------------------------------------------------

def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def replay(data: bytes, log: Path, tailer: LogProgressTailer, clock: Clock, chunk: int = 150,
           dt: float = 0.1) -> None:
    """Append the captured output in chunks, polling as the supervisor does (clock advanced by dt)."""
    for i in range(0, len(data), chunk):
        append(log, data[i:i + chunk])
        clock.now += dt
        tailer.poll()
    for _ in range(20):  # let the last interval pass
        clock.now += dt
        tailer.poll()


def test_tailer_keras_verbose1_events_drive_the_reducer(tmp_path: Path) -> None:
    data = (DATA / "keras_fit_verbose1.log").read_bytes()
    last_loss = float(re.findall(rb" - loss: ([\d.]+)", data)[-1])
    log, ev = tmp_path / "worker-0.log", tmp_path / "worker-0.jsonl"
    clock = Clock()
    tailer = LogProgressTailer(str(log), str(ev), host="h1", job="worker", task=0, clock=clock)
    replay(data, log, tailer, clock)
    tailer.close()
    written = events(ev)
    assert len(written) >= 5  # at most one per second of (fake) time, several seconds of output
    assert all(b["t"] - a["t"] >= 1.0 for a, b in itertools.pairwise(written))
    assert written[-1]["local_step"] == 300 and written[-1]["loss"] == last_loss
    assert written[-1]["examples"] is None  # Keras does not print its batch size
    parser = EventParser()
    state = ClusterState(now=clock.now)
    for line in ev.read_text(encoding="utf-8").splitlines():
        event = parser.parse(line)
        assert isinstance(event, ProgressEvent)
        state.apply(event, event.t)
    state.tick(written[-1]["t"])
    view = state.tasks["worker:0"]
    assert parser.malformed == 0
    assert view.steps_per_s is not None and view.steps_per_s > 0
    assert view.loss == last_loss and view.state == "running"


def test_tailer_resets_on_a_new_attempt_and_drops_the_old_pending_sample(tmp_path: Path) -> None:
    log, ev = tmp_path / "worker-1.log", tmp_path / "worker-1.jsonl"
    clock = Clock()
    tailer = LogProgressTailer(str(log), str(ev), host="h", job="worker", task=1, clock=clock)
    append(log, b"--- tfcluster: starting worker:1 (attempt 1) at now\nINFO:tensorflow:loss = 2.0, step = 0\n")
    tailer.poll()
    append(log, b"INFO:tensorflow:loss = 1.0, step = 50\n")
    clock.now += 1.0
    tailer.poll()  # written: local 50
    append(log, b"INFO:tensorflow:loss = 0.5, step = 80\n")
    clock.now += 0.1
    tailer.poll()  # pending, not yet due
    append(log, b"--- tfcluster: starting worker-1 (attempt 2) at later\nINFO:tensorflow:loss = 0.9, step = 60\n")
    clock.now += 0.1
    tailer.poll()
    append(log, b"INFO:tensorflow:loss = 0.8, step = 90\n")
    clock.now += 1.0
    tailer.poll()
    tailer.close()
    assert tailer.attempt_id == "worker-1#1"
    assert [(e["local_step"], e["global_step"], e["loss"]) for e in events(ev)] == [(50, 50, 1.0), (30, 90, 0.8)]


def test_tailer_stands_down_for_a_task_that_reports_itself(tmp_path: Path) -> None:
    layout = RunLayout(str(tmp_path))
    for d in layout.dirs():
        os.makedirs(d, exist_ok=True)
    plan = {"uses_user_command": True, "training": {"progress_interval": 0.5},
            "tasks": [{"job": "worker", "index": 0, "host": "h"}, {"job": "worker", "index": 1, "host": "other"}]}
    clock = Clock()
    tailers = log_progress_tailers(layout, "h", plan, clock=clock)
    assert [t.name for t in tailers] == ["worker-0"]
    log, ev = Path(layout.log_file("worker", 0)), Path(layout.events_file("worker", 0))
    append(log, b"--- tfcluster: starting worker:0 (attempt 3) at now\nINFO:tensorflow:global_step/sec: 10\n"
                b"INFO:tensorflow:loss = 1.0, step = 10\n")
    poll_tailers(tailers)
    Path(layout.self_progress_file("worker", 0)).write_text("worker-0#1\n")  # an older attempt's marker
    append(log, b"INFO:tensorflow:loss = 0.5, step = 20\n")
    clock.now += 0.6
    poll_tailers(tailers)
    assert [e["local_step"] for e in events(ev)] == [10]
    Path(layout.self_progress_file("worker", 0)).write_text("worker-0#2\n")  # this attempt reports itself
    append(log, b"INFO:tensorflow:loss = 0.4, step = 30\n")
    clock.now += 0.6
    poll_tailers(tailers)
    close_tailers(tailers)
    assert tailers[0].standing_down
    assert [e["local_step"] for e in events(ev)] == [10]


def test_builtin_programs_are_not_tailed(tmp_path: Path) -> None:
    plan = {"uses_user_command": False, "tasks": [{"job": "worker", "index": 0, "host": "h"}]}
    assert log_progress_tailers(RunLayout(str(tmp_path)), "h", plan) == []


WRITER = r"""
import sys, time
data = open(sys.argv[1], 'rb').read()
out = sys.stdout.buffer
for i in range(0, len(data), 300):  # the captured bytes, at the pace of a real run
    out.write(data[i:i + 300]); out.flush(); time.sleep(0.03)
"""


def test_tailer_follows_a_real_writer_process(tmp_path: Path) -> None:
    """A real process writes the captured Keras bytes into its log the way the supervisor wires a task
    (training.supervisor.children.spawn), while the tailer polls every 0.1 s of real time (the wait's
    interval: the supervisor's polling, with the writer's pace, is what is under test)."""
    log, ev = tmp_path / "worker-0.log", tmp_path / "worker-0.jsonl"
    tailer = LogProgressTailer(str(log), str(ev), host="h", job="worker", task=0, interval=0.3)
    child = Child(spawn([sys.executable, "-c", WRITER, str(DATA / "keras_fit_verbose1.log")], dict(os.environ),
                        str(log)))
    wait_for(lambda: tailer.poll() or child.poll() is not None, 30, "the writer to finish", interval=0.1)
    assert child.poll() == 0
    tailer.close()  # reads the rest and writes what is pending, as the supervisor's last poll does
    written = events(ev)
    assert len(written) >= 2
    assert [e["local_step"] for e in written] == sorted(e["local_step"] for e in written)
    assert written[-1]["local_step"] == 300


REPLAY_THEN_FAIL_ONCE = r"""
import os, sys, time
data = open(sys.argv[1], "rb").read()
for line in data.splitlines(keepends=True):  # Keras fit verbose=2, a line every 0.15 s
    sys.stdout.buffer.write(line); sys.stdout.flush(); time.sleep(0.15)
sys.exit(3 if os.environ["TFCLUSTER_TASK_ID"].endswith("#0") else 0)  # the first attempt fails
"""


def test_tailer_with_the_real_supervisor_across_a_restart(tmp_path: Path) -> None:
    """The real supervisor runs a user command (plan.uses_user_command) that prints real Keras output and
    fails once; tailers created after the spawn read the log from its start, reset at the supervisor's
    attempt note, and the reducer fed the supervisor's task_state events and the progress events agrees."""
    layout = RunLayout(str(tmp_path / "runs" / "r1"))
    for d in layout.dirs():
        os.makedirs(d, exist_ok=True)
    task = {"job": "worker", "index": 0, "host": "h1",
            "command": [sys.executable, "-c", REPLAY_THEN_FAIL_ONCE, str(DATA / "keras_fit_verbose2.log")],
            "env": {"TFCLUSTER_JOB": "worker", "TFCLUSTER_TASK": "0"}}
    plan = {"tasks": [task], "uses_user_command": True,
            "training": {"restart": "on-failure", "max_restarts": 2, "progress_interval": 0.3}}
    Path(layout.run_file).write_text(json.dumps({"run_id": "r1", "created": time.time(), "plan": plan,
                                                 "supervisor": {"backoff_initial": 0.3, "poll": 0.05}}))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    sup = subprocess.Popen([sys.executable, "-m", "training.supervisor", "--run-dir", layout.root, "--host", "h1"],
                           env=env, start_new_session=True)
    try:
        # as the supervisor would: tailers made once its task is spawned (its log begun)
        wait_for(Path(layout.log_file("worker", 0)).exists, 30, "the task's log")
        tailers = log_progress_tailers(layout, "h1", json.loads(Path(layout.run_file).read_text())["plan"])
        wait_for(lambda: poll_tailers(tailers) or sup.poll() is not None, 60, "the supervisor to finish", interval=0.1)
        assert sup.poll() == 0
        close_tailers(tailers)
    finally:
        if sup.poll() is None:
            sup.kill()
            sup.wait()
    assert tailers[0].attempt_id == "worker-0#1"
    progress = events(Path(layout.events_file("worker", 0)))
    steps = [e["local_step"] for e in progress]
    restart_at = next(i for i in range(1, len(steps)) if steps[i] < steps[i - 1])
    assert steps[restart_at - 1] == 300 and steps[-1] == 300  # both attempts: 3 epochs of 100, from 0
    parser = EventParser()
    state = ClusterState(now=0.0)
    lines = Path(layout.supervisor_events_file("h1")).read_text().splitlines()
    lines += Path(layout.events_file("worker", 0)).read_text().splitlines()
    parsed = [parser.parse(line) for line in lines]
    for event in sorted((e for e in parsed if e is not None), key=lambda e: e.t):
        state.apply(event, event.t)
    state.tick(state.now)
    view = state.tasks["worker:0"]
    assert parser.malformed == 0 and None not in parsed
    assert view.restarts == 1 and view.local_step == 300 and view.process_state == "exited"

