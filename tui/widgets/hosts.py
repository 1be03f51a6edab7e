"""The hosts panel: one row per host, its CPU, memory and GPU utilisation over the graphs' window as
sparklines (0-100 %) with the last value. As many hosts as the panel has rows, by name; the count of
the others last. Redrawn only when its text changes."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from orchestrator.monitor.reducer import ClusterState
from tui.format import BARS
from tui.widgets.graph_data import host_levels
from tui.widgets.text_table import TextColumn, text_table

HOST_WIDTH = 8
VALUE_WIDTH = 4  # " 99%"


def percent_sparkline(values: Sequence[float | None]) -> str:
    """Bars on a fixed 0-100 % scale (a level, not a rate: an idle host looks idle); blank: no sample."""
    return "".join(" " if v is None else BARS[max(0, min(int(v / 100 * (len(BARS) - 1) + 0.5), len(BARS) - 1))]
                   for v in values)


def last_value(values: Sequence[float | None]) -> str:
    v = next((v for v in reversed(values) if v is not None), None)
    return "-" if v is None else f"{v:.0f}%"


class HostsPanel(Static):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._shown: tuple[object, ...] | None = None
        self.hosts: tuple[str, ...] = ()  # the hosts it shows, in order

    def show_hosts(self, st: ClusterState, window: float | None, label: str) -> None:
        self.border_title = f"hosts %, {label}"
        rows = max(self.size.height - 1, 1)  # the header row
        names = sorted(st.hosts)
        if len(names) > rows:
            names = names[: rows - 1]
        gpus = any(st.hosts[n].gpus for n in st.hosts)
        kinds = 3 if gpus else 2
        spark = max((self.size.width - HOST_WIDTH - 1 - kinds * (VALUE_WIDTH + 1)) // kinds, 3)
        levels = [(name, host_levels(st, name, window, spark)[:kinds]) for name in names]
        more = len(st.hosts) - len(names)
        key = (label, spark, more, tuple(levels))
        if key == self._shown:
            return
        self._shown = key
        self.hosts = tuple(names)
        cols = [TextColumn("host", max_width=HOST_WIDTH), *(TextColumn(kind) for kind in ("cpu", "mem", "gpu")[:kinds])]
        lines: list[list[Text | str]] = [
            [name, *(Text(percent_sparkline(v), style="cyan").append(f"{last_value(v):>{VALUE_WIDTH}}") for v in values)]
            for name, values in levels]
        if more:
            lines.append([Text(f"+{more} more", style="dim")])
        table = text_table(cols, lines)
        self.update(table)
