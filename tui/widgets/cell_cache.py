"""`CellCachedTable`: Textual's DataTable, re-rendering only the cells whose content changed.

Why: DataTable keys its cell render cache on a counter that every `update_cell` bumps, so one changed
cell re-renders every visible cell through Rich at the next refresh. The task table changes a few
cells per row each poll (step, loss, age) out of 11 columns and ~40 visible rows; rendering each cell
costs ~0.1 ms, which made the table's repaint the dashboard's largest cost at 1024 tasks.

The cache below is keyed on everything a cell's rendering depends on: its position (the segments carry
it as mouse metadata), its content, its width and height, and the flags and styles DataTable passes or
reads (cursor, hover, pseudo-classes such as focus, fixed rows and columns, padding). A change of
theme or CSS clears it (`notify_style_update`, as DataTable clears its own). Content is compared by
value: a str, or a rich Text by its text, spans and style attributes (Text's own equality ignores its
base style). The rendered output is exactly DataTable's own: a miss asks DataTable to render the cell.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.widgets import DataTable

SegmentLines = list[list[Segment]]
MAX_CELLS = 20_000  # rendered cells kept (a screen shows a few hundred); the cache restarts when full


def content_key(value: object) -> object:
    """What a cell shows, as a hashable value that differs whenever the rendering may differ."""
    if isinstance(value, str):
        return value
    if isinstance(value, Text):
        return (value.plain, str(value.style), tuple(value.spans), value.justify, value.overflow, value.no_wrap,
                value.end, value.tab_size)
    return (type(value), id(value))  # anything else: never assumed equal to an older value


class CellCachedTable(DataTable[Text | str]):
    def __init__(self, *, id: str | None = None, cursor_type: str = "row") -> None:
        super().__init__(id=id, cursor_type=cursor_type)  # type: ignore[arg-type]
        self._by_content: dict[tuple[object, ...], SegmentLines] = {}

    def notify_style_update(self) -> None:
        self._by_content.clear()
        super().notify_style_update()

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                     cursor: bool = False, hover: bool = False) -> SegmentLines:
        if column_index < 0:  # row labels: this table has none
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        # DataTable's own lookups (what its _render_cell uses): the public ones validate and copy, and
        # this runs for every visible cell on every repaint.
        column_key = self._column_locations.get_key(column_index)
        row_key = self._row_locations.get_key(row_index) if row_index >= 0 else None
        if column_key is None or (row_index >= 0 and row_key is None):  # not a cell: DataTable decides
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        if row_key is None:
            value: object = self.columns[column_key].label
            height = self.header_height
        else:
            value = self._data[row_key][column_key]
            height = self.rows[row_key].height
        key = (row_index, column_index, content_key(value), width, height, base_style, cursor, hover,
               self._show_hover_cursor, self._pseudo_class_state, self.show_cursor, self.fixed_rows,
               self.fixed_columns, self.cell_padding)
        lines = self._by_content.get(key)
        if lines is None:
            lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
            if len(self._by_content) >= MAX_CELLS:
                self._by_content.clear()
            self._by_content[key] = lines
        return lines
