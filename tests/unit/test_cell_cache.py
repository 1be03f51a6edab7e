"""tui/widgets/cell_cache.py: a repaint renders again only the cells whose content changed, and what the
table shows is what a plain DataTable shows, after updates, cursor moves and style-only changes."""

from __future__ import annotations

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from tests.helpers.dash import sync
from tui.widgets.cell_cache import CellCachedTable, content_key

pytestmark = pytest.mark.timeout(60)

ROWS = [("a", "1", "x"), ("b", "2", "y"), ("c", "3", "z")]


class Tables(App[None]):
    def compose(self) -> ComposeResult:
        yield CellCachedTable(id="cached")
        yield DataTable(id="plain", cursor_type="row")

    def on_mount(self) -> None:
        for table in self.query(DataTable):
            for key in ("k", "n", "v"):
                table.add_column(key, key=key, width=6)
            for row in ROWS:
                table.add_row(*row, key=row[0])


def screen_lines(table: DataTable[object]) -> list[str]:
    return [table.render_line(y).text for y in range(len(ROWS) + 1)]


def segments(table: DataTable[object], y: int) -> list[tuple[str, object]]:
    return [(s.text, s.style) for s in table.render_line(y)]


def fresh(table: CellCachedTable, y: int) -> list[tuple[str, object]]:
    """Line y rendered from nothing: every cache of the table dropped first (the reference)."""
    table._by_content.clear()
    table._clear_caches()
    table._update_count += 1
    return segments(table, y)


def misses(table: CellCachedTable) -> int:
    """Cells DataTable itself rendered so far: each went into the content cache once."""
    return len(table._by_content)


@sync
async def test_shows_what_a_plain_table_shows_and_renders_only_changed_cells() -> None:
    app = Tables()
    async with app.run_test(size=(40, 20)) as pilot:
        await pilot.pause()
        cached, plain = app.query_one("#cached", CellCachedTable), app.query_one("#plain", DataTable)
        assert screen_lines(cached) == screen_lines(plain)
        rendered = misses(cached)
        for table in (cached, plain):
            table.update_cell("b", "v", "new")
        await pilot.pause()
        assert screen_lines(cached) == screen_lines(plain)
        assert "new" in screen_lines(cached)[2]
        assert misses(cached) == rendered + 1  # the one changed cell; the others came from the cache
        for table in (cached, plain):  # the same text, styled: a different rendering
            table.update_cell("b", "v", Text("new", style="bold red"))
        await pilot.pause()
        assert misses(cached) == rendered + 2
        shown = segments(cached, 2)
        assert shown == fresh(cached, 2)
        for table in (cached, plain):
            table.move_cursor(row=2)
        await pilot.pause()
        assert screen_lines(cached) == screen_lines(plain)
        shown = [segments(cached, y) for y in range(len(ROWS) + 1)]
        assert shown == [fresh(cached, y) for y in range(len(ROWS) + 1)]  # the cursor row included
        cached.blur()  # focus changes the cursor's colours: a pseudo-class in the key
        await pilot.pause()
        blurred = segments(cached, 3)
        assert blurred != shown[3] and blurred == fresh(cached, 3)


def test_content_key_tells_styled_texts_apart() -> None:
    assert content_key("a") == content_key("a")
    assert content_key(Text("a", style="dim")) == content_key(Text("a", style="dim"))
    assert content_key(Text("a", style="dim")) != content_key(Text("a"))  # Text's own == says equal
    assert Text("a", style="dim") == Text("a")
    assert content_key(Text("a", justify="right")) != content_key(Text("a"))
    assert content_key(object()) != content_key(object())
