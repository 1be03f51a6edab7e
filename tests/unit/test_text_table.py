"""tui/widgets/text_table.py draws what the panels' Rich Table drew, character by character and style by
style, for cells that fit (the panels' cells: names, rates, sparklines): the dashboard's snapshots stayed
the same when the hosts and PS panels moved to it."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from tui.widgets.text_table import TextColumn, text_table

WIDTH = 200


def styled_chars(renderable: RenderableType) -> list[list[tuple[str, str]]]:
    console = Console(width=WIDTH, color_system="truecolor", file=io.StringIO())
    lines = console.render_lines(renderable, console.options.update(width=WIDTH), pad=False)
    return [[(ch, str(seg.style or "")) for seg in line for ch in seg.text] for line in lines]


def rich_table(columns: list[TextColumn], rows: list[list[Text | str]]) -> Table:
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False, expand=False)
    for c in columns:
        table.add_column(c.label, justify=c.justify, max_width=c.max_width, no_wrap=True, overflow="ellipsis")
    for row in rows:  # a str cell is plain text, as text_table draws it (a Table would read markup and :emoji:)
        table.add_row(*(Text(c) if isinstance(c, str) else c for c in row))
    return table


# The panels' cells: no space at either end (a Table strips them where it justifies; text_table keeps them).
words = st.text(alphabet="abcxyz019:.-%▁▃▅█ ", min_size=0, max_size=12).map(str.strip)
cells = st.one_of(words, st.builds(lambda s, style: Text(s, style=style), words, st.sampled_from(["cyan", "dim", "bold red"])))


@settings(max_examples=60, deadline=None)
@given(
    columns=st.lists(st.builds(TextColumn, st.text(alphabet="abcin*", min_size=1, max_size=6),
                               st.sampled_from(["left", "right"]), st.one_of(st.none(), st.integers(3, 10))),
                     min_size=1, max_size=5),
    data=st.data(),
)
def test_the_same_screen_as_a_rich_table(columns: list[TextColumn], data: st.DataObject) -> None:
    rows = data.draw(st.lists(st.lists(cells, min_size=len(columns), max_size=len(columns)), max_size=6))
    assert styled_chars(text_table(columns, rows)) == styled_chars(rich_table(columns, rows))


def test_a_short_row_and_a_cut_name() -> None:
    columns = [TextColumn("host", max_width=8), TextColumn("cpu"), TextColumn("mem")]
    rows: list[list[Text | str]] = [
        ["averyverylonghost", Text("▁▂▃", style="cyan").append("100%"), Text("▁", style="cyan").append("  -")],
        [Text("+120 more", style="dim")],
    ]
    assert styled_chars(text_table(columns, rows)) == styled_chars(rich_table(columns, rows))
    assert text_table(columns, rows).plain.splitlines()[1].startswith("averyve…  ")
