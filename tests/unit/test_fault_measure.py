"""The fault suite's yardsticks (tests/faults/measure.py) on hand-made progress timelines: what they call
a lost step, a rollback, a recovery, and the events files they read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.faults import measure
from tests.faults.measure import Point


def timeline(*rows: tuple[float, str, int, int]) -> list[Point]:
    return [Point(t, task, g, local) for t, task, g, local in rows]


def test_a_worker_fault_loses_nothing_while_the_other_trainer_goes_on() -> None:
    points = timeline((1, "worker:0", 100, 50), (2, "worker:1", 104, 52), (3, "worker:0", 110, 55),
                      (6, "worker:1", 130, 3))  # worker:1's replacement: local steps from 0 again
    assert measure.steps_lost(points, 2.5) == 0
    assert measure.first_step_after(points, 2.5, "worker:1") == points[3]
    assert measure.drops(points) == []


def test_a_ps_fault_is_a_rollback_to_the_restored_step() -> None:
    points = timeline((1, "worker:0", 400, 200), (2, "worker:1", 410, 210), (5, "worker:0", 300, 203),
                      (6, "worker:1", 302, 212), (7, "worker:0", 420, 260))
    assert measure.step_before(points, 3) == 410
    assert measure.lowest_after(points, 3) == 300
    assert measure.steps_lost(points, 3) == 110
    assert [(t, task) for t, task, _high, _low in measure.drops(points)] == [(5, "worker:0"), (6, "worker:1")]


def test_a_late_report_of_a_stopped_worker_is_not_a_rollback() -> None:
    """worker:1 was SIGSTOPped: its first report after SIGCONT carries the step it read before the stop.
    Its own reports never went back, so the global step did not."""
    points = timeline((1, "worker:1", 90, 40), (2, "worker:0", 140, 70), (9, "worker:1", 95, 41),
                      (10, "worker:1", 160, 45))
    assert measure.drops(points) == []


def test_jitter_between_two_trainers_is_tolerated_but_a_real_drop_is_not() -> None:
    small = timeline((1, "worker:0", 100, 10), (2, "worker:0", 100 - measure.JITTER, 11))
    big = timeline((1, "worker:0", 100, 10), (2, "worker:0", 100 - measure.JITTER - 1, 11))
    assert measure.drops(small) == []
    assert measure.drops(big) == [(2, "worker:0", 100, 100 - measure.JITTER - 1)]


@pytest.mark.parametrize(("later_local", "moved"), [(7, True), (1, True), (6, False)])
def test_a_move_is_a_new_local_step_of_the_same_or_a_new_process(later_local: int, moved: bool) -> None:
    points = timeline((1, "worker:1", 50, 6), (4, "worker:1", 52, later_local))
    assert (measure.first_move_after(points, 2, "worker:1") is not None) == moved


def test_progress_points_reads_trainers_only_and_skips_bad_lines(tmp_path: Path) -> None:
    events = tmp_path / "events"
    events.mkdir()
    lines = [
        {"v": 1, "t": 2.0, "kind": "progress", "job": "worker", "task": 1, "global_step": 7, "local_step": 3},
        {"v": 1, "t": 1.0, "kind": "progress", "job": "chief", "task": 0, "global_step": 5, "local_step": 5},
        {"v": 1, "t": 1.5, "kind": "progress", "job": "ps", "task": 0, "global_step": 5},
        {"v": 1, "t": 1.7, "kind": "task_state", "job": "worker", "task": 1, "state": "running"},
    ]
    (events / "x.jsonl").write_text("\n".join(json.dumps(e) for e in lines) + '\n{"t": 3, "kind": "progr\n[]\n')
    assert measure.progress_points([str(tmp_path)]) == [Point(1.0, "chief:0", 5, 5), Point(2.0, "worker:1", 7, 3)]


def test_measuring_writes_one_line_whether_the_block_passed_or_failed(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "faults.jsonl"
    monkeypatch.setenv(measure.RESULTS_ENV, str(out))
    with measure.measuring("a", "run") as m:
        m["steps_lost"] = 0

    def failing_stage() -> None:
        with measure.measuring("b", "run") as figures:
            figures["recover_s"] = 1.5
            raise AssertionError("worker:1 never stepped\nmore")

    with pytest.raises(AssertionError):
        failing_stage()
    first, second = (json.loads(line) for line in out.read_text().splitlines())
    assert (first["fault"], first["result"], first["steps_lost"]) == ("a", "pass", 0)
    assert (second["fault"], second["result"], second["recover_s"]) == ("b", "FAIL: worker:1 never stepped", 1.5)
