"""A report's cells folded into what people compare: medians over repeats, straggler ratios, PS checks.

- `rows(report)`: one Row per (mode, workers, variant): medians (and min..max) over the repeats that
  finished, of cluster examples/s, updates/s, each worker's steps/s, client CPU, time to the target loss,
  each PS's measured and accounted bytes/s, and the predicted PS ceiling next to the measured rate.
- `straggler_effects(report)`: per (mode, workers), each worker's rate with the straggler over its rate
  without, paired repeat by repeat (a change in the machine's load between repeats hits both sides
  alike), the median of those ratios.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.bench.cells import Variant
from orchestrator.bench.report import BenchReport, CellResult

Key = tuple[str, int, str]  # mode, workers, variant


def median(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def spread(values: Iterable[float | None]) -> tuple[float, float] | None:
    known = [v for v in values if v is not None]
    return (min(known), max(known)) if known else None


@dataclass
class Row:
    mode: str
    workers: int
    variant: str
    ok: int
    failed: list[str] = field(default_factory=list)  # the failed cells' errors
    examples_per_s: float | None = None
    examples_range: tuple[float, float] | None = None
    updates_per_s: float | None = None
    per_worker: dict[str, float] = field(default_factory=dict)
    client_cpu_pct: float | None = None
    time_to_loss_s: float | None = None
    ps_measured_Bps: dict[str, float] = field(default_factory=dict)
    ps_accounted_Bps: dict[str, float] = field(default_factory=dict)
    predicted_steps_per_s: float | None = None  # the PS ceiling, per worker
    measured_steps_per_s: float | None = None  # the mean worker rate (median over repeats)
    kill: dict[str, Any] | None = None
    resize: list[dict[str, Any]] = field(default_factory=list)  # each finished repeat's resize figures

    @property
    def key(self) -> Key:
        return (self.mode, self.workers, self.variant)

    @property
    def measured_over_predicted(self) -> float | None:
        m, p = self.measured_steps_per_s, self.predicted_steps_per_s
        return None if m is None or not p else m / p

    def measured_over_accounted(self, ps: str) -> float | None:
        m, a = self.ps_measured_Bps.get(ps), self.ps_accounted_Bps.get(ps)
        return None if m is None or not a else m / a


def _key(c: CellResult) -> Key:
    return (c.cell.mode, c.cell.workers, c.cell.variant)


def groups(report: BenchReport) -> dict[Key, list[CellResult]]:
    out: dict[Key, list[CellResult]] = {}
    for c in report.cells:
        out.setdefault(_key(c), []).append(c)
    return out


def mean_worker_rate(c: CellResult) -> float | None:
    rates = list(c.figures.per_worker_steps_per_s.values()) if c.figures else []
    return statistics.fmean(rates) if rates else None


def make_row(key: Key, results: list[CellResult]) -> Row:
    ok = [c for c in results if c.ok]
    row = Row(key[0], key[1], key[2], len(ok), [c.error or c.status for c in results if not c.ok])
    figs = [c.figures for c in ok if c.figures is not None]
    row.examples_per_s = median(f.examples_per_s for f in figs)
    row.examples_range = spread(f.examples_per_s for f in figs)
    row.updates_per_s = median(f.updates_per_s for f in figs)
    workers = sorted({w for f in figs for w in f.per_worker_steps_per_s}, key=_task_order)
    row.per_worker = {w: v for w in workers if (v := median(f.per_worker_steps_per_s.get(w) for f in figs)) is not None}
    row.client_cpu_pct = median(f.client_cpu_pct for f in figs)
    row.time_to_loss_s = median(f.time_to_target_loss_s for f in figs)
    for ps in sorted({p for f in figs for p in f.ps}):
        if (m := median(f.ps[ps].measured_Bps for f in figs if ps in f.ps)) is not None:
            row.ps_measured_Bps[ps] = m
        if (a := median(f.ps[ps].accounted_Bps for f in figs if ps in f.ps)) is not None:
            row.ps_accounted_Bps[ps] = a
    row.predicted_steps_per_s = median(float(c.ceiling["steps_per_s_per_worker"]) for c in ok if c.ceiling)
    row.measured_steps_per_s = median(mean_worker_rate(c) for c in ok)
    kills = [f.kill for f in figs if f.kill]
    row.kill = kills[0] if len(kills) == 1 else ({"repeats": kills} if kills else None)
    row.resize = [f.resize for f in figs if f.resize]
    return row


def _task_order(name: str) -> tuple[str, int]:
    job, _, index = name.partition(":")
    return (job, int(index) if index.isdigit() else 0)


VARIANT_ORDER: dict[str, int] = {"baseline": 0, "straggler": 1, "kill": 2, "resize": 3}


def rows(report: BenchReport) -> list[Row]:
    modes: list[str] = list(dict.fromkeys(c.cell.mode for c in report.cells))
    ordered = sorted(groups(report).items(),
                     key=lambda kv: (modes.index(kv[0][0]), kv[0][1], VARIANT_ORDER.get(kv[0][2], 9)))
    return [make_row(k, v) for k, v in ordered]


@dataclass
class StragglerEffect:
    mode: str
    workers: int
    straggler: str  # "worker:1"
    ratios: dict[str, float]  # worker -> median over repeats of (rate with / rate without)
    per_repeat: dict[str, list[float]]

    @property
    def others(self) -> dict[str, float]:
        return {w: r for w, r in self.ratios.items() if w != self.straggler}


def straggler_effects(report: BenchReport, straggler: str) -> list[StragglerEffect]:
    by_repeat: dict[tuple[str, int, Variant, int], CellResult] = {
        (c.cell.mode, c.cell.workers, c.cell.variant, c.cell.repeat): c for c in report.cells if c.ok}
    out = []
    for mode, workers in dict.fromkeys((c.cell.mode, c.cell.workers) for c in report.cells):
        paired: dict[str, list[float]] = {}
        for (m, w, variant, repeat), slow in by_repeat.items():
            base = by_repeat.get((m, w, "baseline", repeat))
            if (m, w, variant) != (mode, workers, "straggler") or base is None:
                continue
            assert slow.figures is not None
            assert base.figures is not None
            for name, rate in slow.figures.per_worker_steps_per_s.items():
                before = base.figures.per_worker_steps_per_s.get(name)
                if before:
                    paired.setdefault(name, []).append(rate / before)
        if paired:
            ratios = {n: statistics.median(v) for n, v in sorted(paired.items(), key=lambda kv: _task_order(kv[0]))}
            out.append(StragglerEffect(mode, workers, straggler, ratios, paired))
    return out


@dataclass(frozen=True)
class ResizeEvent:
    """One join or leave of a resize cell, with the cluster's examples/s before and after it."""

    mode: str
    workers: int  # before the event
    repeat: int
    event: str  # join | leave
    tasks: list[str]
    hosts: list[str]
    restarted: list[str]
    took_s: float | None  # the resize itself
    stepping_after_s: float | None  # from the resize asked until every trainer stepped again
    stall_s: float | None  # the longest time without a global step around it
    resumed: bool
    steps_lost: int | None
    examples_before: float | None
    examples_after: float | None
    step_before: int | None = None  # the last global step reported before a restart
    resumed_from: int | None = None  # the step the restarted process resumed from


def resize_events(report: BenchReport) -> list[ResizeEvent]:
    """Every finished resize cell's events, in report order."""
    out = []
    for c in report.cells:
        fig = c.figures.resize if c.figures is not None else None
        if not fig:
            continue
        ex = fig.get("examples_per_s", {})
        phases = {"join": (ex.get("before_join"), ex.get("between")), "leave": (ex.get("between"), ex.get("after_leave"))}
        for e in fig.get("events", []):
            n = int(fig.get("workers", c.cell.workers))
            before, after = phases.get(str(e["event"]), (None, None))
            out.append(ResizeEvent(
                c.cell.mode, n if e["event"] == "join" else n + 1, c.cell.repeat, str(e["event"]), list(e["tasks"]),
                list(e.get("hosts", [])), list(e.get("restarted", [])), e.get("took_s"), e.get("stepping_after_s"),
                e.get("stall_s"), bool(e.get("resumed")), e.get("steps_lost"), before, after,
                e.get("global_step_before"), e.get("resumed_from_step")))
    return out
