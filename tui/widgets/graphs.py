"""The graphs band: the run over time (tui/widgets/graph_data.py), drawn with textual-plotext, and the
hosts' CPU, memory and GPU utilisation as sparklines (tui/widgets/hosts.py).

The app shows the band above the task table when the terminal has the rows for it (or on `g`) and
tells it the window (`w`: 1 min, 10 min, the whole run) through the settings of each StateUpdated.
Hidden, it does no work. Its plots are arranged to their room: two columns of two plots when the band
is tall, one row of four when it is wide and short, the first two side by side when it is narrow and
short (80x24), and the hosts panel at its right when it is wide. A plot is redrawn only when what it
draws changed, and at most every REDRAW_S (plotext builds the whole picture at each render, some
10 ms a plot: at every poll, 4 plots cost ~4 % of a core, more than the dashboard's budget leaves).
"""

from __future__ import annotations

import math

from textual import events
from textual.app import ComposeResult
from textual.containers import Grid, Horizontal
from textual_plotext import PlotextPlot

from orchestrator.monitor.reducer import ClusterState
from tui.messages import StateUpdated
from tui.widgets.graph_data import Graph, frame, window_label
from tui.widgets.hosts import HostsPanel

WIDE_BAND = 120  # columns from which the hosts panel sits at the band's right
TALL_BAND = 16  # rows from which the plots stand two by two
Y_AXIS = 10  # columns plotext takes for the y axis and the frame
REDRAW_S = 5.0  # seconds of the run between two redraws (4 plots at 160x50: ~50 ms of plotext each time)
SHORT_PLOT = 9  # rows below which a plot has no x tick labels
UNITS = ((1e9, "G"), (1e6, "M"), (1e3, "k"))
COUNTS = {"G": "billions", "M": "millions", "k": "thousands"}


def scale(graph: Graph) -> tuple[float, str]:
    """A divisor and its prefix that keep the y axis's numbers short (its title then says which)."""
    top = max((v for line in graph.lines for v in line.values if v is not None), default=0.0)
    return next(((d, p) for d, p in UNITS if top >= d * 10), (1.0, ""))


class GraphsPanel(Horizontal):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._drawn: dict[str, tuple[object, ...]] = {}  # plot key -> what it shows (skip same redraws)
        self._last: StateUpdated | None = None
        self.titles: dict[str, str] = {}  # plot key -> its title as last drawn (what tests and users read)
        self._drawn_at = -math.inf  # the state's clock at the last redraw

    def compose(self) -> ComposeResult:
        with Grid(id="plots"):
            for key in ("examples", "steps", "loss", "traffic"):
                yield PlotextPlot(id=f"plot-{key}")
        yield HostsPanel(id="hosts")

    def on_state_updated(self, message: StateUpdated) -> None:
        self._last = message
        if not self.display:
            return
        with message.measured():
            # A poll redraws at most every REDRAW_S (plotext's build is the dashboard's costliest
            # drawing); a new setting (no frame: the user's key) at once.
            st = message.state
            if message.frame is None or st.now - self._drawn_at >= REDRAW_S:
                self._show(st, message.settings.graph_window)

    def on_resize(self, _event: events.Resize) -> None:
        self._arrange()
        if self._last is not None and self.display:
            self._show(self._last.state, self._last.settings.graph_window)

    def on_show(self) -> None:
        self.on_resize(events.Resize(self.size, self.size))

    def _arrange(self) -> None:
        """Two by two when tall; one row of four when wide and short; narrow and short, the first two."""
        grid = self.query_one("#plots", Grid)
        wide, tall = self.size.width >= WIDE_BAND, self.size.height >= TALL_BAND
        self.query_one(HostsPanel).display = wide
        shown = 4 if wide or tall else 2
        for i, plot in enumerate(self.query(PlotextPlot)):
            plot.display = i < shown
        cols = 4 if wide and not tall else 2
        grid.styles.grid_size_columns = cols
        grid.styles.grid_size_rows = math.ceil(shown / cols)

    def _show(self, st: ClusterState, window: float | None) -> None:
        self._drawn_at = st.now
        plots = {p.id: p for p in self.query(PlotextPlot) if p.display}
        room = min((p.size.width for p in plots.values()), default=0) - Y_AXIS
        fr = frame(st, window, max(room, 10))
        span = fr.end - fr.start
        minutes = span > 180
        unit = 60.0 if minutes else 1.0
        step = span / fr.points
        xs = [-(span - (i + 0.5) * step) / unit for i in range(fr.points)]
        label = window_label(window)
        for g in fr.graphs:
            plot = plots.get(f"plot-{g.key}")
            if plot is None:
                continue  # not shown at this size
            div, prefix = scale(g)
            ago = "min ago" if minutes else "s ago"  # the x axis: time before now
            what = g.title.replace("B/s", f"{prefix}B/s") if "B/s" in g.title else (
                f"{g.title} ({COUNTS[prefix]})" if prefix else g.title)  # 128000 examples/s: "128 (thousands)"
            title = f"{what}, {label} ({ago})"
            shown = (title, minutes, plot.size, g.lines)
            if self._drawn.get(g.key) == shown:
                continue
            self._drawn[g.key] = shown
            self.titles[g.key] = title
            plt = plot.plt
            plt.clear_data()
            plt.title(title)
            if plot.size.height < SHORT_PLOT:
                plt.xticks([])  # a short plot keeps its rows for the lines
            plt.xlim(-span / unit, 0)  # the window's whole width, however much of it has data
            for line in g.lines:
                pts = [(x, v / div) for x, v in zip(xs, line.values, strict=True) if v is not None]
                if pts:
                    plt.plot([p[0] for p in pts], [p[1] for p in pts], label=line.label, marker="braille")
            plot.refresh()
        self.query_one(HostsPanel).show_hosts(st, window, label)
