"""The task table: one row per task, keyed by task name, sorted and filtered, updated in place.

Frame-time contract: when the set and order of rows is unchanged, only the rows on screen are brought
up to date, and in them only the cells whose text changed (every changed cell invalidates the table's
render cache; rows off screen are caught up when they scroll into view), and a repaint renders again
only the cells whose text changed (tui/widgets/cell_cache.py). A full rebuild happens only
when the columns (terminal width) or the set or order of rows change (filter, sort, a new task).
"""

from __future__ import annotations

from textual.widgets import DataTable

from orchestrator.monitor.reducer import ClusterState
from tui.messages import StateUpdated
from tui.widgets.cell_cache import CellCachedTable
from tui.widgets.gpu_use import has_gpu_use
from tui.widgets.task_columns import Column, cell, columns, row_texts, visible_tasks


class TasksTable(CellCachedTable):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row")
        self.sort_key = "host"
        self.sort_reverse = False
        self.order: list[str] = []  # task names, in row order
        self._columns: tuple[Column, ...] = ()
        self._cells: dict[str, tuple[str, ...]] = {}  # task name -> the plain texts its row shows
        self._last: StateUpdated | None = None

    def on_mount(self) -> None:
        self.watch(self, "scroll_y", self._on_scroll, init=False)

    def on_state_updated(self, message: StateUpdated) -> None:
        self._last = message
        with message.measured():
            self._show(message.state, message.settings.filter_text, message.wide)

    def selected_task(self) -> str | None:
        row = self.cursor_row
        return self.order[row] if 0 <= row < len(self.order) else None

    def cycle_sort(self) -> str:
        """Sort by the next column (ascending); returns its key."""
        keys = [c.key for c in self._columns] or ["host"]
        i = keys.index(self.sort_key) if self.sort_key in keys else -1
        self.sort_key, self.sort_reverse = keys[(i + 1) % len(keys)], False
        self._again()
        return self.sort_key

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        key = str(event.column_key.value)
        if key == self.sort_key:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_key, self.sort_reverse = key, False
        self._again()

    def _on_scroll(self, _old: float, _new: float) -> None:
        self._again()

    def _again(self) -> None:
        """Show the last state again (a new sort, or rows scrolled into view)."""
        if self._last is not None:
            self._show(self._last.state, self._last.settings.filter_text, self._last.wide)

    def _show(self, st: ClusterState, filter_text: str, wide: bool) -> None:
        cols = columns(wide, has_gpu_use(st))
        if cols != self._columns:
            self._columns = cols
            self.clear(columns=True)
            for c in cols:
                self.add_column(c.label, width=c.width, key=c.key)
            self.order, self._cells = [], {}
        tasks = visible_tasks(st, filter_text, self.sort_key, self.sort_reverse)
        order = [t.name for t in tasks]
        spark_width = next(c.width for c in cols if c.key == "spark")
        grouped = self.sort_key == "host" and not self.sort_reverse
        show_host = [not grouped or i == 0 or tasks[i - 1].host != tv.host for i, tv in enumerate(tasks)]
        if order != self.order:
            current = self.selected_task()
            self.clear()
            self._cells = {}
            for i, tv in enumerate(tasks):
                row = row_texts(st, tv, cols, show_host[i], spark_width)
                self.add_row(*(cell(c.key, v, tv) for c, v in zip(cols, row, strict=True)), key=tv.name)
                self._cells[tv.name] = row
            self.order = order
            if current in order:
                self.move_cursor(row=order.index(current), animate=False)
            return
        first = max(int(self.scroll_y) - 2, 0)
        last = first + self.size.height + 4
        for i in range(first, min(last, len(tasks))):
            tv = tasks[i]
            old, new = self._cells.get(tv.name), row_texts(st, tv, cols, show_host[i], spark_width)
            if old == new:
                continue
            for j, c in enumerate(cols):
                if old is None or old[j] != new[j]:
                    self.update_cell(tv.name, c.key, cell(c.key, new[j], tv))
            self._cells[tv.name] = new
