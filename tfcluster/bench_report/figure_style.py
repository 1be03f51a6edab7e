"""What every bench figure shares, so each reads alike and none lets its labels collide.

- `framed(question, where, panels)`: a Figure on the Agg canvas (no display, no pyplot state) with
  constrained layout, titled in bold with the question it answers and, below it, where it ran (wrapped to
  the figure's width; `subtitle(fig)` reads it back); at least MIN_WIDTH wide, each panel `panel_width`
  or `INCH_PER_CATEGORY` per category, up to MAX_PANEL_WIDTH;
- `MODE_COLORS`: one colour per replication mode in every figure (terminal_charts uses the same hues);
- `categorical_x`: worker counts evenly spaced (1, 2, 4, 8 as a log2 axis would), every one labelled
  while they fit; past that matplotlib's MaxNLocator labels every k-th, as on any numeric axis;
- `count_scale`: a value axis on a log scale when the values span `LOG_SPREAD`x or more (so the
  smallest series stays readable), ticks at 1, 2, 5 x 10^k written out in full; else linear from 0;
- `legend_below`: one legend for the whole figure, outside the panels (it never hides data or labels).
"""

from __future__ import annotations

import textwrap
from collections.abc import Collection, Sequence
from typing import Any, get_args

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from orchestrator.config.modes import Mode

MODE_COLORS: dict[str, str] = dict(zip(get_args(Mode), ("tab:blue", "tab:orange", "tab:green", "tab:red"),
                                       strict=True))
HEIGHT = 4.8  # inches, at 100 dpi
PANEL_WIDTH = 5.0
MAX_PANEL_WIDTH = 9.0
MIN_WIDTH = 7.0  # the question's title fits on one line
INCH_PER_CATEGORY = 0.45  # a worker count's label, with room around it
CHARS_PER_INCH = 12  # of the 10 pt subtitle
LEGEND_CHARS_PER_INCH = 14  # of the 9 pt legend
LOG_SPREAD = 5.0


def framed(question: str, where: str, panels: int = 1, *, panel_width: float = PANEL_WIDTH, categories: int = 0,
           sharey: bool = False) -> tuple[Figure, list[Axes]]:
    width = max(MIN_WIDTH, panels * min(MAX_PANEL_WIDTH, max(panel_width, categories * INCH_PER_CATEGORY)) + 0.5)
    fig = Figure(figsize=(width, HEIGHT), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(question, fontsize=13, fontweight="bold")
    body = fig.add_subfigure(fig.add_gridspec(1, 1)[0])  # its own title, laid out under the question's
    body.suptitle(textwrap.fill(where, max(40, int(width * CHARS_PER_INCH))), fontsize=10)
    axes = list(body.subplots(1, panels, sharey=sharey, squeeze=False)[0])
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return fig, axes


def subtitle(fig: Figure) -> str:
    return fig.subfigs[0].get_suptitle() if fig.subfigs else ""


def mode_color(mode: str) -> str:
    return MODE_COLORS.get(mode, "tab:gray")


def categorical_x(ax: Axes, labels: Sequence[str]) -> None:
    """Labels at 0, 1, ... with half a slot of margin each side (every series at a category stays in)."""

    def label(position: float, _index: Any = None) -> str:
        return labels[int(position)] if float(position).is_integer() and 0 <= position < len(labels) else ""

    ax.xaxis.set_major_locator(MaxNLocator(nbins="auto", integer=True, min_n_ticks=1))  # as many as fit
    ax.xaxis.set_major_formatter(FuncFormatter(label))
    ax.set_xlim(-0.5, len(labels) - 0.5)


def _written_out(value: float, _position: Any = None) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:g}"


def count_scale(ax: Axes, values: Sequence[float]) -> None:
    """The y axis on a log scale when the positive values span LOG_SPREAD x or more, else linear from 0
    (a linear axis cut above 0 would make a small change look large)."""
    known = [v for v in values if v > 0]
    if not known or max(known) / min(known) < LOG_SPREAD:
        ax.set_ylim(bottom=0)
        return
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(_written_out))
    ax.yaxis.set_minor_formatter(NullFormatter())  # minor ticks stay, unlabelled: never crowded


def legend_below(fig: Figure, axes: Sequence[Axes], leave_out: Collection[str] = ()) -> None:
    """Every labelled series of the panels once (but those the tick labels already name), in one legend
    under them."""
    seen: dict[str, Any] = {}
    for ax in axes:
        handles, labels = ax.get_legend_handles_labels()
        for handle, label in zip(handles, labels, strict=True):
            if label not in leave_out:
                seen.setdefault(label, handle)
    if not seen:
        return
    longest = max(len(label) for label in seen) + 8  # the handle and the gap
    columns = max(1, min(len(seen), int(fig.get_figwidth() * LEGEND_CHARS_PER_INCH) // longest))
    fig.legend(list(seen.values()), list(seen), loc="outside lower center", ncols=columns, fontsize=9,
               frameon=False)
