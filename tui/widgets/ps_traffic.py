"""The PS traffic panel: per PS task, bytes/s in and out as the host's kernel measured them and as the
workers accounted them (`*`); the wide layout adds the host and the number of peers. A
multi-worker-mirrored run has no PS: the panel shows each worker's measured all-reduce traffic instead
(nothing is accounted there: `-`). Redrawn only when a shown value changes."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from orchestrator.monitor.reducer import ClusterState
from tui import format as fmt
from tui.messages import StateUpdated
from tui.widgets.text_table import TextColumn, text_table

COMPACT_WIDTH = 36  # columns of the panel below 120 columns of terminal
WIDE_WIDTH = 58  # with the host and peers columns: narrower, and every rate is cut
PS_HOST_WIDTH = 16  # a longer host name is cut (an ellipsis): one line per PS task

PsRow = tuple[str, str, str, str, str, str, int]  # name, host, measured in, accounted in, measured out, accounted out, peers


PS_TITLE = "PS traffic B/s (* accounted)"
ALLREDUCE_TITLE = "All-reduce traffic B/s (measured)"


def ps_rows(st: ClusterState) -> tuple[PsRow, ...]:
    if not st.ps and st.allreduce:
        return tuple(
            (p.name, p.host, fmt.byte_rate_short(p.measured_in), "-", fmt.byte_rate_short(p.measured_out), "-",
             len(p.peers))
            for p in sorted(st.allreduce.values(), key=lambda p: p.name))
    return tuple(
        (p.name, p.host, fmt.byte_rate_short(p.measured_in), fmt.byte_rate_short(p.accounted_in),
         fmt.byte_rate_short(p.measured_out), fmt.byte_rate_short(p.accounted_out), len(p.peers))
        for p in sorted(st.ps.values(), key=lambda p: p.name))


class PsTrafficPanel(Static):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: tuple[PsRow, ...] | None = None  # what the panel shows, one tuple per PS task
        self._shape: tuple[object, ...] | None = None  # what decides the table's size (see _show)

    def on_mount(self) -> None:
        self.border_title = PS_TITLE

    def on_state_updated(self, message: StateUpdated) -> None:
        with message.measured():
            st = message.state
            self.border_title = ALLREDUCE_TITLE if not st.ps and st.allreduce else PS_TITLE
            self._show(ps_rows(st), message.wide)

    def _show(self, rows: tuple[PsRow, ...], wide: bool) -> None:
        if rows == self.rows:
            return
        self.rows = rows
        self.styles.width = WIDE_WIDTH if wide else COMPACT_WIDTH
        # The table's size follows from its rows and the widest text in each column: while those stay,
        # new values need no layout pass (a layout resizes the task table, which re-renders every cell).
        shape = (wide, len(rows), *(max((len(str(r[i])) for r in rows), default=0) for i in range(7)))
        layout, self._shape = shape != self._shape, shape
        if not rows:
            self.update(Text("no parameter servers", style="dim"), layout=layout)
            return
        cols = [TextColumn("task"), *([TextColumn("host", max_width=PS_HOST_WIDTH)] if wide else []),
                *(TextColumn(label, "right") for label in ("in", "in*", "out", "out*")),
                *([TextColumn("peers", "right")] if wide else [])]
        table = text_table(cols, [[name, *([host] if wide else []), mi, ai, mo, ao, *([str(peers)] if wide else [])]
                                  for name, host, mi, ai, mo, ao, peers in rows])
        self.update(table, layout=layout)
