"""`text_table`: a few columns of one-line cells as one rich Text, laid out as the panels' Rich `Table`
(no box, no edge, one space of padding each side of a column, a bold header) lays them out when every
cell fits. Why: the hosts and PS panels are redrawn once a second, and a Table measures and renders every
cell through Rich's layout each time (at 1024 tasks on 128 hosts, about 3 % of a core between the two
panels, benchmarks/results/dash.md); a Text of padded lines costs a small fraction of that and draws the
same screen (tests/unit/test_text_table.py compares the two).

Cells are the panels' texts, with no space at either end (a Table strips those; here they are kept).
Cells never wrap: a column is as wide as its widest cell or its label, or `max_width` with the cell cut
with an ellipsis (the host column), as the Table's `no_wrap`/`overflow="ellipsis"` columns do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.cells import cell_len
from rich.text import Text

HEADER_STYLE = "bold"  # Rich's "table.header" in the default theme
GAP = "  "  # the right padding of a column and the left padding of the next


@dataclass(frozen=True)
class TextColumn:
    label: str
    justify: Literal["left", "right"] = "left"
    max_width: int | None = None


def text_table(columns: Sequence[TextColumn], rows: Sequence[Sequence[Text | str]]) -> Text:
    """The header line and one line per row; a row shorter than the columns leaves the rest blank."""
    cells = [[c if isinstance(c, Text) else Text(c) for c in row] for row in rows]
    widths = []
    for i, col in enumerate(columns):
        width = max([cell_len(col.label), *(r[i].cell_len for r in cells if i < len(r))])
        widths.append(min(width, col.max_width) if col.max_width else width)
    out = Text(end="")
    out.append_text(_line([Text(c.label) for c in columns], columns, widths, style=HEADER_STYLE))
    for row in cells:
        out.append("\n")
        out.append_text(_line(row, columns, widths))
    return out


def _line(row: Sequence[Text], columns: Sequence[TextColumn], widths: Sequence[int], style: str = "") -> Text:
    """One line; a cell's own style covers its padding (as in a Table), the header's style the whole line."""
    line = Text(end="", style=style)
    for i, (col, width) in enumerate(zip(columns, widths, strict=True)):
        if i:
            line.append(GAP)
        cell = row[i].copy() if i < len(row) else Text("")
        if cell.cell_len > width:
            cell.truncate(width, overflow="ellipsis")
        if col.justify == "right":
            cell.pad_left(width - cell.cell_len)
        else:
            cell.pad_right(width - cell.cell_len)
        line.append_text(cell)
    return line
