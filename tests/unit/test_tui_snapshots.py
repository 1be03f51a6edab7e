"""Snapshot tests of the dashboard's screens (pytest-textual-snapshot): the dashboard at 80x24, 140x40
and 240x60 (a layout change shows in review at every size: the graphs band grows with the terminal), the
task screen at 80x24 and 160x50.

The clock is a FakeClock and the streams are synthetic, so the rendered screens are deterministic.
Regenerate baselines after an intended change: pytest tests/unit/test_tui_snapshots.py --snapshot-update
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.dash import SCENARIOS, make_app

SIZES = [(80, 24), (140, 40), (240, 60)]
TASK_SIZES = [(80, 24), (160, 50)]
pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_dashboard_screen(snap_compare: Any, scenario: str, size: tuple[int, int]) -> None:
    app, _, _ = make_app(scenario)
    assert snap_compare(app, terminal_size=size)


@pytest.mark.parametrize("size", TASK_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_task_screen(snap_compare: Any, size: tuple[int, int]) -> None:
    app, _, _ = make_app("restart")

    async def open_task(pilot: Any) -> None:
        await pilot.press("down")  # worker-2, the one that was killed and restarted
        await pilot.press("enter")
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=open_task)


def test_confirm_screen(snap_compare: Any) -> None:
    app, _, _ = make_app("healthy")
    assert snap_compare(app, terminal_size=(80, 24), press=["k"])


def test_ps_task_screen(snap_compare: Any) -> None:
    app, _, _ = make_app("unreachable")

    async def open_ps(pilot: Any) -> None:
        await pilot.press("down", "down", "down", "down", "enter")  # ps-0: rows are grouped by host
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()

    assert snap_compare(app, terminal_size=(80, 24), run_before=open_ps)
