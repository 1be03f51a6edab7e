"""The tasks' TensorBoard runs: event files written by the stdlib writer (training/telemetry/tfevents.py) as
TensorBoard's own loader reads them, and TaskSummaries turning the ProgressReporter's events into points
(real files, the real reporter; TensorBoard's EventAccumulator reads them back)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import requires
from tests.helpers.clock import FakeClock
from training.telemetry.task_summaries import TaskSummaries
from training.telemetry.tfevents import EventFileWriter, crc32c
from training.telemetry.writer import ProgressReporter

requires.tensorboard()


def scalars(directory: Path) -> dict[str, list[tuple[float, int, float]]]:
    """{tag: [(wall_time, step, value)]} as TensorBoard loads the run in `directory`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(s.wall_time, s.step, s.value) for s in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_crc32c_is_castagnolis() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value
    assert crc32c(b"") == 0


def test_tensorboard_reads_the_stdlib_event_file(tmp_path: Path) -> None:
    writer = EventFileWriter(str(tmp_path / "worker-1"))
    writer.add_scalars(5, [("loss", 0.5), ("steps_per_s", 12.25)], wall_time=1000.0)
    writer.add_scalars(7, [("loss", 0.1)], wall_time=1001.5)
    writer.close()
    assert writer.path is not None and "tfevents" in Path(writer.path).name
    assert Path(writer.path).stat().st_mode & 0o777 == 0o600
    got = scalars(tmp_path / "worker-1")
    assert got["steps_per_s"] == [(1000.0, 5, 12.25)]
    assert got["loss"] == [(1000.0, 5, 0.5), (1001.5, 7, pytest.approx(0.1, rel=1e-6))]


def test_every_reported_event_is_a_point_with_the_dashboards_numbers(tmp_path: Path) -> None:
    clock = FakeClock()
    rep = ProgressReporter(str(tmp_path / "events" / "worker-1.jsonl"), host="h", job="worker", task=1,
                           interval=3600, ps_bytes_per_step={"ps-0": {"pulled": 10, "pushed": 8}}, clock=clock,
                           summaries=TaskSummaries(str(tmp_path / "summaries" / "worker-1"))).start()
    for local_step, global_step, loss in ((4, 10, 2.5), (10, 31, 1.25), (12, 40, 0.75)):
        rep.record(local_step, global_step, local_step * 32, loss)
        clock.now += 2.0
        rep.flush()
    rep.close()
    events = [json.loads(line) for line in (tmp_path / "events" / "worker-1.jsonl").read_text().splitlines()]
    got = scalars(tmp_path / "summaries" / "worker-1")
    assert [(s, v) for _, s, v in got["loss"]] == [(e["global_step"], e["loss"]) for e in events]
    assert [t for t, _, _ in got["loss"]] == pytest.approx([e["t"] for e in events])
    assert [v for _, _, v in got["steps_per_s"]] == [2.0, 3.0, 1.0]  # steps in the interval / 2 s
    assert [v for _, _, v in got["examples_per_s"]] == [64.0, 96.0, 32.0]
    assert [v for _, _, v in got["ps_traffic/ps:0/pulled_bytes_per_s"]] == [20.0, 30.0, 10.0]
    assert [v for _, _, v in got["ps_traffic/ps:0/pushed_bytes_per_s"]] == [16.0, 24.0, 8.0]


def test_points_every_n_global_steps_carry_rates_over_their_whole_span(tmp_path: Path) -> None:
    summaries = TaskSummaries(str(tmp_path / "chief-0"), every_steps=100)
    progress = [  # (t, global_step, steps in the interval, examples so far, interval_s)
        (1.0, 40, 40, 40, 1.0), (2.0, 90, 50, 90, 1.0), (3.0, 150, 60, 150, 1.0), (4.0, 199, 49, 199, 1.0),
        (5.0, 201, 2, 201, 1.0)]
    wrote = [summaries.add({"t": t, "global_step": g, "local_step": g, "steps": n, "examples": ex,
                            "interval_s": dt, "loss": 1.0 / g,
                            "towers": {"worker-0": {"compute_s": 0.01, "delay_s": 0.0}}})
             for t, g, n, ex, dt in progress]
    summaries.close()
    assert wrote == [True, False, True, False, True]  # the first, then each time a multiple of 100 is crossed
    got = scalars(tmp_path / "chief-0")
    assert [s for _, s, _ in got["loss"]] == [40, 150, 201]
    assert [v for _, _, v in got["steps_per_s"]] == [40.0, 55.0, 25.5]  # (50 + 60) / 2 s, (49 + 2) / 2 s
    assert [v for _, _, v in got["examples_per_s"]] == [40.0, 55.0, 25.5]
    assert [v for _, _, v in got["towers/worker:0/compute_s"]] == pytest.approx([0.01] * 3)


def test_a_point_that_cannot_be_written_never_repeats_the_event(tmp_path: Path) -> None:
    (tmp_path / "summaries").write_text("a file where the directory should be")
    clock = FakeClock()
    path = tmp_path / "worker-0.jsonl"
    rep = ProgressReporter(str(path), host="h", job="worker", task=0, interval=3600, clock=clock,
                           summaries=TaskSummaries(str(tmp_path / "summaries" / "worker-0"))).start()
    rep.record(1, 1, 32, 0.5)
    assert rep.flush() is True
    assert rep.flush() is False
    rep.close()
    assert len(path.read_text().splitlines()) == 1
