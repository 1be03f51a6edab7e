"""The bench report's PNG figures (matplotlib, Agg: no display needed), each with a JSON description.

Figures are built on `matplotlib.figure.Figure` objects (no pyplot state), so a test can inspect their
axes and series before they are saved. `describe(fig)` is what `figures.json` (written next to the
PNGs) holds: per axes its title, labels, and every line and bar series with its data.

- throughput: cluster examples/s against workers, one line per mode (median of the repeats, min..max
  bars), with each mode's ideal linear scaling from its smallest worker count;
- workers: each worker's steps/s without and with the straggler, per mode;
- loss: loss against wall time since the first step, per mode (target loss as a line);
- ps: bytes/s through each PS task, measured and accounted, per cell, against the link's limit;
- scaling: the measured per-worker step rate against the predicted PS ceiling, per mode.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from orchestrator.bench.report import BenchReport
from orchestrator.bench.summary import Row, rows

MB = 1e6
SIZE = (7.5, 4.5)


def _figure(title: str) -> tuple[Figure, Any]:
    fig = Figure(figsize=SIZE, dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _baseline(all_rows: list[Row]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = {}
    for r in all_rows:
        if r.variant == "baseline" and r.examples_per_s is not None:
            out.setdefault(r.mode, []).append(r)
    return out


def throughput_figure(all_rows: list[Row]) -> Figure:
    fig, ax = _figure("Cluster examples/s against workers")
    for mode, mode_rows in _baseline(all_rows).items():
        xs = [r.workers for r in mode_rows]
        ys = [r.examples_per_s or 0.0 for r in mode_rows]
        low = [y - (r.examples_range or (y, y))[0] for y, r in zip(ys, mode_rows, strict=True)]
        high = [(r.examples_range or (y, y))[1] - y for y, r in zip(ys, mode_rows, strict=True)]
        line = ax.plot(xs, ys, marker="o", label=mode)[0]
        ax.errorbar(xs, ys, yerr=[low, high], fmt="none", ecolor=line.get_color(), capsize=3)
        per_worker = ys[0] / xs[0]
        ax.plot(xs, [per_worker * x for x in xs], linestyle="--", color=line.get_color(), alpha=0.6,
                label=f"{mode} ideal (linear)")
    ax.set_xlabel("workers")
    ax.set_ylabel("examples/s (cluster)")
    ax.set_xticks(sorted({r.workers for r in all_rows}) or [1])
    ax.legend(fontsize=7)
    return fig


def workers_figure(all_rows: list[Row], straggler: str | None) -> Figure:
    title = "Per-worker steps/s" + (f", without and with straggler {straggler}" if straggler else "")
    fig, ax = _figure(title)
    pairs = _straggler_pairs(all_rows)
    labels: list[str] = []
    base_vals: list[float] = []
    slow_vals: list[float] = []
    for base, slow in pairs:
        for worker, rate in base.per_worker.items():
            labels.append(f"{base.mode}\n{worker}")
            base_vals.append(rate)
            slow_vals.append(slow.per_worker.get(worker, 0.0) if slow else 0.0)
    xs = list(range(len(labels)))
    width = 0.4
    ax.bar([x - width / 2 for x in xs], base_vals, width, label="without straggler")
    if any(slow for _, slow in pairs):
        ax.bar([x + width / 2 for x in xs], slow_vals, width, label=f"with straggler {straggler or ''}".strip())
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, fontsize=6)
    ax.set_ylabel("steps/s per worker")
    ax.legend(fontsize=7)
    return fig


def _straggler_pairs(all_rows: list[Row]) -> list[tuple[Row, Row | None]]:
    """Per mode: the baseline row at the largest worker count that has a straggler row (else the largest)."""
    out = []
    by_key = {r.key: r for r in all_rows}
    for mode in dict.fromkeys(r.mode for r in all_rows):
        counts = sorted({r.workers for r in all_rows if r.mode == mode and r.variant == "straggler" and r.ok})
        counts = counts or sorted({r.workers for r in all_rows if r.mode == mode and r.ok})
        if not counts:
            continue
        base = by_key.get((mode, counts[-1], "baseline"))
        if base is not None and base.per_worker:
            out.append((base, by_key.get((mode, counts[-1], "straggler"))))
    return out


def loss_figure(report: BenchReport, target: float | None) -> Figure:
    fig, ax = _figure("Loss against wall time (since the first step)")
    shown: set[str] = set()
    largest: dict[str, int] = {}
    for c in report.cells:
        if c.ok and c.cell.variant == "baseline":
            largest[c.cell.mode] = max(largest.get(c.cell.mode, 0), c.cell.workers)
    for c in report.cells:
        if not c.ok or c.cell.variant != "baseline" or c.cell.mode in shown or c.figures is None:
            continue
        if c.cell.workers != largest[c.cell.mode] or not c.figures.loss_curve:
            continue
        shown.add(c.cell.mode)
        ax.plot([t for t, _ in c.figures.loss_curve], [v for _, v in c.figures.loss_curve],
                label=f"{c.cell.mode} ({c.cell.workers} workers)")
    if target is not None:
        ax.axhline(target, color="grey", linestyle=":", label=f"target loss {target:g}")
    ax.set_xlabel("seconds since the first step")
    ax.set_ylabel("loss")
    ax.legend(fontsize=7)
    return fig


def ps_figure(all_rows: list[Row], capacity_Bps: float, source: str) -> Figure:
    fig, ax = _figure("PS bytes/s per PS task (in + out) against the link limit")
    labels, measured, accounted = [], [], []
    for r in all_rows:
        for ps in sorted(set(r.ps_measured_Bps) | set(r.ps_accounted_Bps)):
            labels.append(f"{r.mode}\nw{r.workers} {r.variant}\n{ps}")
            measured.append(r.ps_measured_Bps.get(ps, 0.0) / MB)
            accounted.append(r.ps_accounted_Bps.get(ps, 0.0) / MB)
    xs = list(range(len(labels)))
    ax.bar([x - 0.2 for x in xs], measured, 0.4, label="measured (kernel TCP counters)")
    ax.bar([x + 0.2 for x in xs], accounted, 0.4, label="accounted (workers' ps_bytes)")
    if capacity_Bps > 0:
        ax.axhline(capacity_Bps / MB, color="red", linestyle="--", label=f"link limit ({source})")
        if 0 < max(measured + accounted, default=0.0) < capacity_Bps / MB / 10:
            ax.set_yscale("log")  # far below the limit: both stay readable
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, fontsize=5)
    ax.set_ylabel("MB/s through the PS task")
    ax.legend(fontsize=7)
    return fig


def scaling_figure(all_rows: list[Row]) -> Figure:
    fig, ax = _figure("Per-worker steps/s: measured against the predicted PS ceiling")
    for mode in dict.fromkeys(r.mode for r in all_rows):
        mine = [r for r in all_rows if r.mode == mode and r.variant == "baseline" and r.measured_steps_per_s]
        if not mine:
            continue
        line = ax.plot([r.workers for r in mine], [r.measured_steps_per_s for r in mine], marker="o",
                       label=f"{mode} measured")[0]
        ceil = [r for r in mine if r.predicted_steps_per_s is not None]
        if ceil:
            ax.plot([r.workers for r in ceil], [r.predicted_steps_per_s for r in ceil], linestyle="--",
                    color=line.get_color(), label=f"{mode} predicted PS ceiling")
    ax.set_xlabel("workers")
    ax.set_ylabel("steps/s per worker")
    ax.set_yscale("log")
    ax.set_xticks(sorted({r.workers for r in all_rows}) or [1])
    ax.legend(fontsize=7)
    return fig


def build_figures(report: BenchReport) -> dict[str, Figure]:
    all_rows = [r for r in rows(report) if r.ok]
    straggler = report.spec.get("straggler")
    straggler_label = None
    if isinstance(straggler, dict):
        task = straggler.get("task", {})
        straggler_label = f"{task.get('job')}:{task.get('index')} ×{straggler.get('factor'):g}"
    target = report.spec.get("target_loss") if any(
        c.cluster.get("model") == "mlp" for c in report.cells) else None
    return {
        "throughput": throughput_figure(all_rows),
        "workers": workers_figure(all_rows, straggler_label),
        "loss": loss_figure(report, target if isinstance(target, int | float) else None),
        "ps": ps_figure(all_rows, report.capacity_Bps, str(report.link.get("source", ""))),
        "scaling": scaling_figure(all_rows),
    }


def _containers(ax: Any) -> list[Any]:
    """The axes' bar containers (matplotlib 3.8's type hints do not declare `Axes.containers`)."""
    return list(ax.containers)


def describe(fig: Figure) -> dict[str, Any]:
    """Every axes' title, labels, lines and bar series with their data (the figures.json sidecar)."""
    axes = []
    for ax in fig.axes:
        lines = [{"label": str(line.get_label()), "x": np.asarray(line.get_xdata(), dtype=float).tolist(),
                  "y": np.asarray(line.get_ydata(), dtype=float).tolist()}
                 for line in ax.get_lines() if not str(line.get_label()).startswith("_")]
        bars = [{"label": str(c.get_label()), "heights": [float(p.get_height()) for p in c.patches]}
                for c in _containers(ax) if hasattr(c, "patches") and not str(c.get_label()).startswith("_")]
        axes.append({"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
                     "xticklabels": [t.get_text() for t in ax.get_xticklabels()], "lines": lines, "bars": bars})
    return {"axes": axes}


def save_figures(figures: dict[str, Figure], directory: Path, prefix: str = "") -> list[Path]:
    """<directory>/<prefix><name>.png for each figure, and <prefix>figures.json describing them."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in figures.items():
        path = directory / f"{prefix}{name}.png"
        fig.savefig(path, bbox_inches="tight")
        paths.append(path)
    sidecar = directory / f"{prefix}figures.json"
    sidecar.write_text(json.dumps({name: describe(f) for name, f in figures.items()}, indent=1) + "\n",
                       encoding="utf-8")
    return [*paths, sidecar]
