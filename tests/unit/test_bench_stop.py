"""A bench cell's stop (orchestrator/bench/cell_run.py `_stop`) goes to its end whatever Ctrl-C cuts: the
collector is closed and the run stopped, verified, even when a Ctrl-C lands inside the close or the stop
(CI once saw one land inside the collector's start; a second one inside the close would have skipped the
stop and left the cell's cluster running). The interrupts are raised where they would land, because a
real Ctrl-C cannot be aimed at a line; the stop itself is stood in for by a recorder (a run is stopped
for real by tests/integration/test_bench_sshd.py)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.bench import cell_run
from orchestrator.bench.cells import Cell
from orchestrator.bench.report import CellResult


class Cut:
    """Raise KeyboardInterrupt on the first `cuts` calls, then do nothing; count the calls."""

    def __init__(self, cuts: int) -> None:
        self.cuts, self.calls = cuts, 0

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1
        if self.calls <= self.cuts:
            raise KeyboardInterrupt


def test_through_ctrl_c_runs_the_action_to_its_end() -> None:
    action = Cut(2)
    assert cell_run.through_ctrl_c(action) is True and action.calls == 3
    quiet = Cut(0)
    assert cell_run.through_ctrl_c(quiet) is False and quiet.calls == 1
    stubborn = Cut(5)
    assert cell_run.through_ctrl_c(stubborn, attempts=3) is True and stubborn.calls == 3  # never for ever


class Collector:
    def __init__(self, poll_cuts: int, close_cuts: int) -> None:
        self.poll, self.close = Cut(poll_cuts), Cut(close_cuts)


@pytest.mark.parametrize("where", ["poll", "close", "stop", "phase"])
def test_a_ctrl_c_anywhere_in_the_stop_skips_none_of_it(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cell_run, "INTERVAL_S", 0.0)
    collector = Collector(poll_cuts=int(where == "poll"), close_cuts=int(where == "close"))
    stops = Cut(int(where == "stop"))

    def stop_run(record: object, grace: float) -> dict[str, Any]:
        stops(record)
        return {}

    monkeypatch.setattr(cell_run, "stop_run", stop_run)
    live = cell_run._Live(record=object(), collector=collector)  # type: ignore[arg-type]
    phases = Cut(int(where == "phase"))
    result = CellResult(Cell("between-graph", 1, "baseline", 0))
    assert cell_run._stop(live, result, phases) is True
    assert collector.close.calls == 1 + (where == "close") and stops.calls == 1 + (where == "stop")
    assert result.stopped_clean is True
