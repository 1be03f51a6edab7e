"""ProgressReporter and PS-traffic accounting: real files and a real thread, no TensorFlow."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from tests.helpers.clock import FakeClock
from training.telemetry.accounting import PlacedVariable, ps_bytes_per_step, ps_task_of
from training.telemetry.writer import ProgressReporter


def read_events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_ps_task_of_parses_device_strings() -> None:
    assert ps_task_of("/job:ps/task:1/device:CPU:0") == "ps-1"
    assert ps_task_of("/job:ps/replica:0/task:12") == "ps-12"
    assert ps_task_of("/job:worker/task:0/device:GPU:0") is None
    assert ps_task_of("") is None


def test_ps_bytes_per_step_counts_pull_for_all_push_for_trainable() -> None:
    variables = [
        PlacedVariable("a", "/job:ps/task:0/device:CPU:0", 400),
        PlacedVariable("b", "/job:ps/task:1/device:CPU:0", 40),
        PlacedVariable("global_step", "/job:ps/task:1/device:CPU:0", 8, trainable=False),
        PlacedVariable("local", "/job:worker/task:0/device:CPU:0", 1000),
    ]
    assert ps_bytes_per_step(variables) == {"ps-0": {"pulled": 400, "pushed": 400}, "ps-1": {"pulled": 48, "pushed": 40}}
    assert ps_bytes_per_step(variables, pulls_per_step=3)["ps-0"] == {"pulled": 1200, "pushed": 400}


def test_flush_writes_one_valid_event_per_new_sample(tmp_path: Path) -> None:
    clock = FakeClock()
    path = tmp_path / "events" / "worker-1.jsonl"
    rep = ProgressReporter(str(path), host="h1", job="worker", task=1, interval=3600,
                           ps_bytes_per_step={"ps-0": {"pulled": 10, "pushed": 8}}, clock=clock)
    rep.start()
    try:
        assert rep.flush() is False  # nothing recorded yet: no event
        rep.record(5, 12, 640, 2.5)
        clock.now += 2.0
        assert rep.flush() is True
        assert rep.flush() is False  # same sample: no duplicate
        rep.record(8, 20, 1024, float("nan"))
        clock.now += 1.5
        assert rep.flush() is True
    finally:
        rep.close()
    first, second = read_events(path)
    assert first["kind"] == "progress" and first["v"] == 1
    assert (first["host"], first["job"], first["task"]) == ("h1", "worker", 1)
    assert (first["local_step"], first["global_step"], first["examples"], first["loss"]) == (5, 12, 640, 2.5)
    assert first["interval_s"] == 2.0 and first["steps"] == 5
    assert first["ps_bytes"] == {"ps-0": {"pulled": 50, "pushed": 40}}
    assert second["steps"] == 3 and second["interval_s"] == 1.5
    assert second["ps_bytes"] == {"ps-0": {"pulled": 30, "pushed": 24}}
    assert second["loss"] is None  # NaN is not valid JSON


def test_background_thread_writes_at_most_one_event_per_interval(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    interval = 0.2
    rep = ProgressReporter(str(path), host="h", job="chief", task=0, interval=interval).start()
    start = time.monotonic()
    step = 0
    while time.monotonic() - start < 1.0:  # a busy "training loop" recording as fast as it can
        step += 1
        rep.record(step, step, step * 32, 1.0 / step)
    rep.close()
    elapsed = time.monotonic() - start
    events = read_events(path)
    assert 2 <= len(events) <= elapsed / interval + 2  # periodic events plus the final flush on close
    assert events[-1]["local_step"] == step  # close() flushed the last sample
    steps = [e["local_step"] for e in events]
    assert steps == sorted(steps)
    assert sum(e["steps"] for e in events) == step


def test_record_never_waits_for_a_slow_disk(tmp_path: Path) -> None:
    """The writer holds its lock while writing; record() must not touch that lock."""
    rep = ProgressReporter(str(tmp_path / "x.jsonl"), host="h", job="worker", task=0, interval=3600)
    rep.start()
    try:
        with rep._write_lock:  # simulate a write stuck on disk
            done = threading.Event()

            def loop() -> None:
                for i in range(1000):
                    rep.record(i, i, i, 0.0)
                done.set()

            t = threading.Thread(target=loop)
            t.start()
            assert done.wait(5.0)
            t.join()
    finally:
        rep.close()
    assert read_events(tmp_path / "x.jsonl")[-1]["local_step"] == 999


def test_close_is_idempotent_and_appends(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    for run in range(2):
        rep = ProgressReporter(str(path), host="h", job="worker", task=0, interval=3600).start()
        rep.record(run + 1, run + 1, 1, 0.5)
        rep.close()
        rep.close()
    assert [e["local_step"] for e in read_events(path)] == [1, 2]
