"""The scaling and straggler figures in the terminal, for users on a remote shell without an image viewer.

Rich bar charts (`rich.bar.Bar` in a grid) of the same data as the PNGs (orchestrator.bench.answers):
- `scaling_chart`: per mode and worker count, the scaling efficiency as a bar (for a mode measured at
  two counts or more) and the cluster examples/s beside it; the first row is the ideal, 1.0;
- `straggler_chart`: per mode, the other workers' rate with the straggler as a share of their rate
  without it; the first row is 100 %.
Both are titled with the question they answer, as the PNGs are; bars share one scale within a chart.
Rich only, no matplotlib; each mode in the hue its PNG lines and bars have.
"""

from __future__ import annotations

from typing import get_args

from rich.bar import Bar
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from orchestrator.bench.answers import ScalingPoint, StragglerShare
from orchestrator.config.modes import Mode

MODE_STYLES: dict[str, str] = dict(zip(get_args(Mode), ("blue", "dark_orange", "green", "red"), strict=True))
WIDTH = 40
REFERENCE = "grey50"


def _grid() -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column()
    grid.add_column(justify="right")
    grid.add_column(width=WIDTH)
    grid.add_column()
    return grid


def scaling_chart(points: dict[str, list[ScalingPoint]]) -> RenderableType:
    title = Text("Does adding workers pay? scaling efficiency (examples/s ÷ workers × the rate per worker at "
                 "the fewest workers; 1.0 = linear), and cluster examples/s", style="bold")
    if not points:
        return Group(title, Text("(no finished baseline cell)", style="dim"))
    size = max([1.0, *(p.efficiency for mode_points in points.values() for p in mode_points)])
    grid = _grid()
    grid.add_row(Text("ideal", style=REFERENCE), "", Bar(size, 0, 1.0, width=WIDTH, color=REFERENCE), "1.00")
    for mode, mode_points in points.items():
        style = MODE_STYLES.get(mode, "default")
        compared = len(mode_points) > 1  # alone, a count is 1.0 of itself: no bar to read
        for k, p in enumerate(mode_points):
            grid.add_row(Text(mode if k == 0 else "", style=style), f"{p.workers} w",
                         Bar(size, 0, p.efficiency, width=WIDTH, color=style) if compared else "",
                         (f"{p.efficiency:.2f}" if compared else "-") + f"  {p.examples_per_s:,.0f} examples/s")
    return Group(title, grid)


def straggler_chart(shares: list[StragglerShare], straggler: str) -> RenderableType:
    title = Text(f"Does a slow worker hold the others back? The other workers' steps/s with the straggler "
                 f"{straggler}, as a share of without it", style="bold")
    size = max([1.0, *(s.others for s in shares)])
    grid = _grid()
    grid.add_row(Text("without the straggler", style=REFERENCE), "",
                 Bar(size, 0, 1.0, width=WIDTH, color=REFERENCE), "100 %")
    for s in shares:
        style = MODE_STYLES.get(s.mode, "default")
        own = "" if s.straggler is None else f"  (the straggler itself {100 * s.straggler:.0f} %)"
        grid.add_row(Text(s.mode, style=style), f"{s.workers} w", Bar(size, 0, s.others, width=WIDTH, color=style),
                     f"{100 * s.others:.0f} %{own}")
    return Group(title, grid)
