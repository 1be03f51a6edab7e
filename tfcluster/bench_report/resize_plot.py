"""The resize figure: what does a worker joining and leaving cost each mode? (`tfcluster bench --resize`)

One panel per mode (its first finished resize cell): the run's global step, as its reference task reported
it (orchestrator/bench/resize_figures.py), against the seconds since the measured window began; each
resize shaded from when it was asked until it returned, a dotted line where every trainer stepped again.
A flat stretch is the time without a step; a drop, the steps a restart lost. The panel's title says both.
"""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from orchestrator.bench.report import BenchReport, CellResult
from tfcluster.bench_report.figure_style import framed, legend_below, mode_color

EVENT_COLORS = {"join": "tab:green", "leave": "tab:red"}
PANEL_WIDTH = 4.6


def resize_cells(report: BenchReport) -> list[CellResult]:
    """Per mode, its first resize cell with figures, in report order."""
    out: dict[str, CellResult] = {}
    for c in report.cells:
        if c.cell.variant == "resize" and c.figures is not None and c.figures.resize and c.window is not None:
            out.setdefault(c.cell.mode, c)
    return list(out.values())


def _panel_title(c: CellResult, fig: dict[str, Any]) -> str:
    parts = []
    for e in fig.get("events", []):
        stall = e.get("stall_s")
        parts.append(f"{e['event']}: {'-' if stall is None else f'{stall:.1f}'} s stalled, {e.get('steps_lost', '-')} lost")
    return f"{c.cell.mode}\n" + "; ".join(parts)


def resize_figure(report: BenchReport, where: str) -> Figure:
    chosen = resize_cells(report)
    fig, axes = framed("What does a worker joining and leaving cost?", where, panels=len(chosen),
                       panel_width=PANEL_WIDTH)
    for ax, c in zip(axes, chosen, strict=True):
        assert c.figures is not None
        assert c.figures.resize is not None
        assert c.window is not None
        figures = c.figures.resize
        start = c.window[0]
        ref = figures.get("reference")
        series = [p for p in c.samples.of_task(str(ref)) if start <= p.t <= c.window[1]] if ref else []
        ax.plot([p.t - start for p in series], [p.global_step for p in series], marker=".", markersize=3,
                color=mode_color(c.cell.mode), label=f"global step ({ref})" if ref else "global step")
        for e in figures.get("events", []):
            at, took = float(e["at_s"]), float(e.get("took_s") or 0.0)
            color = EVENT_COLORS.get(str(e["event"]), "tab:gray")
            ax.axvspan(at, at + took, color=color, alpha=0.2, label=f"{e['event']}: the resize")
            if e.get("stepping_after_s") is not None:
                ax.axvline(at + float(e["stepping_after_s"]), color=color, linestyle=":",
                           label=f"{e['event']}: every trainer stepping again")
        ax.set_title(_panel_title(c, figures), fontsize=9, color=mode_color(c.cell.mode))
        ax.set_xlabel("seconds into the measured window")
        ax.set_ylim(bottom=0)
    axes[0].set_ylabel("global step")
    legend_below(fig, axes)
    return fig
