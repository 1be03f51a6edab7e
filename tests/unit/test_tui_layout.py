"""The dashboard's layout at 80x24, 140x40 and 240x60 on every replayed scenario: no band of empty rows
(a big terminal fills with graphs, not blank space), and nothing cut at 80 columns.

An empty band is a run of screen rows with nothing drawn on them, measured on the rendered screen (the
compositor's lines, what the terminal would show).
"""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Footer

from tests.helpers.dash import SCENARIOS, make_app, sync
from tui.app import DashboardApp
from tui.widgets.graphs import GraphsPanel

SIZES = [(80, 24), (140, 40), (240, 60)]
MAX_EMPTY_ROWS = 3  # "a few": a short bottom strip may leave one or two
pytestmark = pytest.mark.timeout(60)


def screen_rows(app: DashboardApp) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


def largest_empty_band(rows: list[str]) -> int:
    """The longest run of consecutive blank rows."""
    longest = run = 0
    for row in rows:
        run = run + 1 if not row.strip() else 0
        longest = max(longest, run)
    return longest


def test_the_measure_counts_consecutive_blank_rows() -> None:
    assert largest_empty_band(["a", " ", "  ", "b", " ", "c"]) == 2
    assert largest_empty_band(["a", "b"]) == 0


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("scenario", list(SCENARIOS))
@sync
async def test_no_empty_band(scenario: str, size: tuple[int, int]) -> None:
    app, _, _ = make_app(scenario)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        await pilot.pause()
        rows = screen_rows(app)
        assert len(rows) == size[1]
        band = largest_empty_band(rows)
        assert band <= MAX_EMPTY_ROWS, f"{band} empty rows at {size}:\n" + "\n".join(rows)


@sync
async def test_the_layout_without_graphs_had_the_band_the_issue_saw() -> None:
    """The measure sees the issue's layout: at 140x40 without the graphs, 4 task rows then ~25 blank."""
    app, _, _ = make_app("healthy")
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        # The layout before the graphs: the table takes every row between the header and the bottom strip.
        app.query_one(GraphsPanel).display = False
        app.set_class(False, "-graphs")
        await pilot.pause()
        assert largest_empty_band(screen_rows(app)) > 20


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@sync
async def test_nothing_cut_at_80_columns(scenario: str) -> None:
    app, _, _ = make_app(scenario)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        rows = screen_rows(app)
        assert "running " in rows[1], rows[:2]  # the header's second line: a long first line never hides it
        table = app.query_one("#tasks", DataTable)
        assert table.max_scroll_x == 0  # every column in view
        footer = app.query_one(Footer)
        assert footer.max_scroll_x == 0  # every key's label in view
        for widget in app.screen.query("*"):
            if widget.display and widget.region.width:
                assert widget.region.right <= 80, widget
