"""The bench report's PNG figures, one per question, each with a JSON description (figures.json).

Every figure is titled with the question it answers and where it ran (figure_style.framed); the data is
orchestrator.bench.answers' and summary's, the figure only draws it:
- scaling (when a baseline cell finished): does adding workers pay? Scaling efficiency against workers
  per mode, 1.0 drawn as the ideal, and beside it cluster examples/s (median of the repeats, min..max
  bars) on a scale that keeps every mode visible (log when the modes differ 5x or more);
- straggler (with --straggler): does a slow worker hold the others back? One bar per mode: the other
  workers' rate with the straggler as a share of their rate without it, 100 % drawn;
- ps (when a PS carried traffic): one panel per mode, per worker count and PS task the bytes/s measured
  by the kernel beside those the workers accounted, against the link's limit;
- loss (when loss was recorded): loss against seconds since the first step, per mode at its largest
  worker count, the target loss drawn (mlp);
- resize (with --resize): the global step through a worker's join and leave, per mode (resize_plot.py).
Figures are `matplotlib.figure.Figure` objects (no pyplot state), so a test can inspect them before they
are saved; `describe(fig)` is what figures.json holds: the title and where it ran, and per axes its
labels, limits, tick labels in view and every labelled line and bar series with its data.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from orchestrator.bench.answers import (
    ScalingPoint,
    StragglerShare,
    scaling,
    straggler_label,
    straggler_shares,
    where_it_ran,
)
from orchestrator.bench.report import BenchReport
from orchestrator.bench.summary import Row, rows
from tfcluster.bench_report.figure_style import (
    categorical_x,
    count_scale,
    framed,
    legend_below,
    mode_color,
    subtitle,
)
from tfcluster.bench_report.resize_plot import resize_cells, resize_figure

MB = 1e6
PS_COLORS = ("tab:purple", "tab:brown", "tab:cyan", "tab:olive", "tab:pink", "tab:gray")
IDEAL = "ideal: linear scaling (1.0)"
OTHERS = "the other workers, with the straggler"
STRAGGLER_WIDTH = 7.5  # inches: the mode names beside the bars
PS_PANEL_WIDTH = 3.4


def scaling_figure(points: dict[str, list[ScalingPoint]], where: str) -> Figure:
    counts = sorted({p.workers for mode_points in points.values() for p in mode_points})
    slot = {n: i for i, n in enumerate(counts)}
    fig, (eff_ax, abs_ax) = framed("Does adding workers pay?", where, panels=2, categories=len(counts))
    from_one = all(mode_points[0].workers == 1 for mode_points in points.values())
    eff_ax.set_title(textwrap.fill("examples/s ÷ (workers × " + ("the 1-worker rate)" if from_one else
                                   "the rate per worker at the mode's fewest workers)"), 50), fontsize=10)
    eff_ax.set_ylabel("scaling efficiency (1.0 = linear)")
    eff_ax.axhline(1.0, color="grey", linestyle="--", label=IDEAL)
    compared = {mode: mode_points for mode, mode_points in points.items() if len(mode_points) > 1}
    for mode, mode_points in compared.items():
        eff_ax.plot([slot[p.workers] for p in mode_points], [p.efficiency for p in mode_points], marker="o",
                    color=mode_color(mode), label=mode)
    if not compared:
        eff_ax.text(0.5, 0.5, "one worker count per mode:\nno scaling to compare", transform=eff_ax.transAxes,
                    ha="center", va="center", color="grey")
    top = max([p.efficiency for mode_points in compared.values() for p in mode_points], default=1.0)
    eff_ax.set_ylim(0, max(1.15, top * 1.12))
    abs_ax.set_title("cluster examples/s", fontsize=10)
    abs_ax.set_ylabel("examples/s (cluster, median of repeats)")
    for mode, mode_points in points.items():
        xs = [slot[p.workers] for p in mode_points]
        ys = [p.examples_per_s for p in mode_points]
        abs_ax.plot(xs, ys, marker="o", color=mode_color(mode), label=mode)
        abs_ax.errorbar(xs, ys, yerr=[[y - p.examples_range[0] for y, p in zip(ys, mode_points, strict=True)],
                                      [p.examples_range[1] - y for y, p in zip(ys, mode_points, strict=True)]],
                        fmt="none", ecolor=mode_color(mode), capsize=3)
    count_scale(abs_ax, [v for mode_points in points.values() for p in mode_points for v in p.examples_range])
    for ax in (eff_ax, abs_ax):
        categorical_x(ax, [str(n) for n in counts])
        ax.set_xlabel("workers")
    legend_below(fig, [eff_ax, abs_ax])
    return fig


def straggler_figure(shares: list[StragglerShare], straggler: str, where: str) -> Figure:
    fig, (ax,) = framed(f"Does a slow worker hold the others back? (straggler {straggler})", where,
                        panel_width=STRAGGLER_WIDTH)
    values = [100 * s.others for s in shares]
    bars = ax.barh(range(len(shares)), values, color=[mode_color(s.mode) for s in shares], height=0.6,
                   label=OTHERS)
    ax.bar_label(bars, [f"{v:.0f} %" for v in values], padding=4)
    ax.axvline(100, color="black", linestyle="--", label="100 %: their rate without the straggler")
    ax.set_yticks(range(len(shares)), [f"{s.mode}\n{s.workers} workers" for s in shares])
    ax.set_ylim(len(shares) - 0.5, -0.5)  # the first mode on top
    ax.set_xlim(0, max([*values, 100.0]) * 1.2)  # room for the last bar's label
    ax.xaxis.set_major_formatter(PercentFormatter(xmax=100))
    ax.set_xlabel("the other workers' steps/s with the straggler\n(share of their steps/s without it)")
    legend_below(fig, [ax], leave_out=[OTHERS])  # a bar per mode, in the mode's colour: the ticks name them
    return fig


def ps_figure(all_rows: list[Row], capacity_Bps: float, source: str, where: str) -> Figure:
    by_mode: dict[str, list[Row]] = {}
    for r in all_rows:
        if r.variant == "baseline" and (r.ps_measured_Bps or r.ps_accounted_Bps):
            by_mode.setdefault(r.mode, []).append(r)
    ps_tasks = sorted({p for mode_rows in by_mode.values() for r in mode_rows
                       for p in (*r.ps_measured_Bps, *r.ps_accounted_Bps)})
    counts = max((len(mode_rows) for mode_rows in by_mode.values()), default=1)
    fig, axes = framed("How close does each PS task come to its link's limit?", where, panels=len(by_mode),
                       panel_width=PS_PANEL_WIDTH, categories=counts, sharey=True)
    width = 0.8 / (2 * len(ps_tasks))
    values: list[float] = [capacity_Bps / MB] if capacity_Bps > 0 else []
    for ax, (mode, mode_rows) in zip(axes, by_mode.items(), strict=True):
        ax.set_title(mode, fontsize=10, color=mode_color(mode))
        for j, ps in enumerate(ps_tasks):
            color = PS_COLORS[j % len(PS_COLORS)]
            measured_at = [i - 0.4 + 2 * j * width + width / 2 for i in range(len(mode_rows))]  # its slot's part
            measured = [r.ps_measured_Bps.get(ps, 0.0) / MB for r in mode_rows]
            accounted = [r.ps_accounted_Bps.get(ps, 0.0) / MB for r in mode_rows]
            ax.bar(measured_at, measured, width, color=color, label=f"{ps} measured (kernel TCP counters)")
            ax.bar([x + width for x in measured_at], accounted, width, color="white", edgecolor=color, hatch="//",
                   label=f"{ps} accounted (the workers' ps_bytes)")
            values += measured + accounted
        if capacity_Bps > 0:
            ax.axhline(capacity_Bps / MB, color="red", linestyle="--",
                       label=f"link limit {capacity_Bps / MB:,.0f} MB/s in+out ({source})")
        categorical_x(ax, [str(r.workers) for r in mode_rows])
        ax.set_xlabel("workers")
    axes[0].set_ylabel("MB/s through the PS task (in + out)")
    count_scale(axes[0], values)
    if axes[0].get_yscale() == "log":  # bars grow from the bottom: leave the smallest one some height
        axes[0].set_ylim(bottom=min(v for v in values if v > 0) / 3)
    legend_below(fig, axes)
    return fig


def loss_figure(report: BenchReport, target: float | None, where: str) -> Figure:
    fig, (ax,) = framed("How fast does each mode bring the loss down?", where)
    largest: dict[str, int] = {}
    for c in report.cells:
        if c.ok and c.cell.variant == "baseline":
            largest[c.cell.mode] = max(largest.get(c.cell.mode, 0), c.cell.workers)
    shown: set[str] = set()
    for c in report.cells:
        if (not c.ok or c.cell.variant != "baseline" or c.cell.mode in shown or c.figures is None
                or c.cell.workers != largest[c.cell.mode] or not c.figures.loss_curve):
            continue
        shown.add(c.cell.mode)
        ax.plot([t for t, _ in c.figures.loss_curve], [v for _, v in c.figures.loss_curve],
                color=mode_color(c.cell.mode), label=f"{c.cell.mode} ({c.cell.workers} workers)")
    if target is not None:
        ax.axhline(target, color="grey", linestyle=":", label=f"target loss {target:g}")
    ax.set_xlabel("seconds since the first step")
    ax.set_ylabel("loss")
    legend_below(fig, [ax])
    return fig


def build_figures(report: BenchReport) -> dict[str, Figure]:
    """The figures this report has data for."""
    all_rows = [r for r in rows(report) if r.ok]
    where = where_it_ran(report)
    figures: dict[str, Figure] = {}
    points = scaling(all_rows)
    if points:
        figures["scaling"] = scaling_figure(points, where)
    straggler, shares = straggler_label(report), straggler_shares(report)
    if straggler is not None and shares:
        figures["straggler"] = straggler_figure(shares, straggler, where)
    if any(r.variant == "baseline" and (r.ps_measured_Bps or r.ps_accounted_Bps) for r in all_rows):
        figures["ps"] = ps_figure(all_rows, report.capacity_Bps, str(report.link.get("source", "")), where)
    if any(c.ok and c.figures is not None and c.figures.loss_curve for c in report.cells):
        target = report.spec.get("target_loss")
        mlp = any(c.cluster.get("model") == "mlp" for c in report.cells)  # the target is mlp's
        figures["loss"] = loss_figure(report, float(target) if mlp and isinstance(target, int | float) else None,
                                      where)
    if resize_cells(report):
        figures["resize"] = resize_figure(report, where)
    return figures


def _containers(ax: Any) -> list[Any]:
    """The axes' bar containers (matplotlib's type hints do not declare `Axes.containers`)."""
    return list(ax.containers)


def _bar_values(container: Any) -> list[float]:
    horizontal = getattr(container, "orientation", "vertical") == "horizontal"
    return [float(p.get_width() if horizontal else p.get_height()) for p in container.patches]


def _tick_labels(axis: Any) -> list[str]:
    """The labels of the major ticks in view (the locator also places some beyond it, not drawn)."""
    low, high = sorted(axis.get_view_interval())
    return [label.get_text() for loc, label in zip(axis.get_majorticklocs(), axis.get_majorticklabels(), strict=False)
            if low <= loc <= high and label.get_text()]


def describe(fig: Figure) -> dict[str, Any]:
    """The figure's title, and every axes' labels, limits, lines and bar series with their data."""
    axes = []
    for ax in fig.axes:
        lines = [{"label": str(line.get_label()), "x": np.asarray(line.get_xdata(), dtype=float).tolist(),
                  "y": np.asarray(line.get_ydata(), dtype=float).tolist()}
                 for line in ax.get_lines() if not str(line.get_label()).startswith("_")]
        bars = [{"label": str(c.get_label()), "values": _bar_values(c)}
                for c in _containers(ax) if hasattr(c, "patches") and not str(c.get_label()).startswith("_")]
        axes.append({"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
                     "xlim": [float(v) for v in ax.get_xlim()], "ylim": [float(v) for v in ax.get_ylim()],
                     "xscale": ax.get_xscale(), "yscale": ax.get_yscale(),
                     "xticklabels": _tick_labels(ax.xaxis), "yticklabels": _tick_labels(ax.yaxis),
                     "lines": lines, "bars": bars})
    return {"title": fig.get_suptitle(), "where": subtitle(fig), "axes": axes}


def save_figures(figures: dict[str, Figure], directory: Path, prefix: str = "") -> list[Path]:
    """<directory>/<prefix><name>.png for each figure, and <prefix>figures.json describing them."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in figures.items():
        path = directory / f"{prefix}{name}.png"
        fig.savefig(path)
        paths.append(path)
    sidecar = directory / f"{prefix}figures.json"
    sidecar.write_text(json.dumps({name: describe(f) for name, f in figures.items()}, indent=1) + "\n",
                       encoding="utf-8")
    return [*paths, sidecar]
