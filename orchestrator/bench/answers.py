"""The data of the bench's figures, one function per question they answer, shared by the PNGs and the
terminal charts (pure: a report in, numbers out).

- `scaling(rows)`: does adding workers pay? Per mode, at each worker count: cluster examples/s (median of
  the repeats, min..max) and the scaling efficiency, examples/s over N x the rate per worker at the mode's
  smallest worker count (1.0: linear; the figure Horovod and tf_cnn_benchmarks users quote);
- `straggler_shares(report)`: does a slow worker hold the others back? Per mode, at its largest worker
  count with a straggler cell: the other workers' rate with the straggler as a share of their rate
  without it (the mean over those workers of the paired per-repeat medians of `straggler_effects`);
  `straggler_label` names the straggler as every title does (`worker:1 ×4`);
- `where_it_ran(report)`: the machines, as bench.json records them, for every figure's title.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from orchestrator.bench.report import BenchReport
from orchestrator.bench.summary import Row, straggler_effects
from orchestrator.plan.names import task_name

MAX_HOSTS_NAMED = 4  # beyond that the title counts them


@dataclass(frozen=True)
class ScalingPoint:
    workers: int
    examples_per_s: float
    examples_range: tuple[float, float]
    efficiency: float  # examples/s / (workers x the per-worker rate at the mode's smallest count)


def scaling(rows: list[Row]) -> dict[str, list[ScalingPoint]]:
    """Per mode (in report order), its finished baseline cells by worker count."""
    by_mode: dict[str, list[Row]] = {}
    for r in rows:
        if r.variant == "baseline" and r.ok and r.examples_per_s:
            by_mode.setdefault(r.mode, []).append(r)
    out: dict[str, list[ScalingPoint]] = {}
    for mode, mode_rows in by_mode.items():
        mode_rows.sort(key=lambda r: r.workers)
        per_worker = (mode_rows[0].examples_per_s or 0.0) / mode_rows[0].workers
        out[mode] = [ScalingPoint(r.workers, r.examples_per_s or 0.0,
                                  r.examples_range or (r.examples_per_s or 0.0, r.examples_per_s or 0.0),
                                  (r.examples_per_s or 0.0) / (r.workers * per_worker))
                     for r in mode_rows]
    return out


@dataclass(frozen=True)
class StragglerShare:
    mode: str
    workers: int
    others: float  # the other workers' rate with the straggler / without it (1.0: unaffected)
    straggler: float | None  # the straggler's own ratio


def straggler_task(report: BenchReport) -> tuple[str, float] | None:
    """The straggler's task name (`worker:1`) and factor, when the bench ran one."""
    spec = report.spec.get("straggler")
    if not isinstance(spec, dict):
        return None
    task = spec["task"]
    return task_name(str(task["job"]), int(task["index"])), float(spec["factor"])


def straggler_label(report: BenchReport) -> str | None:
    """`worker:1 ×4`, as the figures and charts name the straggler."""
    straggler = straggler_task(report)
    return None if straggler is None else f"{straggler[0]} ×{straggler[1]:g}"


def straggler_shares(report: BenchReport) -> list[StragglerShare]:
    straggler = straggler_task(report)
    if straggler is None:
        return []
    name = straggler[0]
    per_mode: dict[str, StragglerShare] = {}
    for effect in straggler_effects(report, name):
        current = per_mode.get(effect.mode)
        if effect.others and (current is None or effect.workers > current.workers):
            per_mode[effect.mode] = StragglerShare(effect.mode, effect.workers,
                                                   statistics.fmean(effect.others.values()), effect.ratios.get(name))
    return list(per_mode.values())


def where_it_ran(report: BenchReport) -> str:
    """`cluster test: m0, m1, m2 · machine: 2 CPUs · link 10 Gb/s each way (--nic-gbps) · mlp, batch 32 ·
    2026-12-03`: what bench.json says about the machines, the model and the day."""
    hosts = list(dict.fromkeys(h for c in report.cells for h in c.cluster.get("hosts", [])))
    named = ", ".join(hosts[:MAX_HOSTS_NAMED]) + (f", … ({len(hosts)} hosts)" if len(hosts) > MAX_HOSTS_NAMED else "")
    parts = [f"cluster {report.cluster}" + (f": {named}" if named else "")]
    if report.machine.get("cpus"):
        parts.append(f"machine: {report.machine['cpus']} CPUs")
    if report.link.get("nic_gbps"):
        parts.append(f"link {float(report.link['nic_gbps']):.3g} Gb/s each way ({report.link.get('source')})")
    models = dict.fromkeys((c.cluster.get("model"), c.cluster.get("batch_size")) for c in report.cells
                           if c.cluster.get("model"))
    parts += [f"{model}, batch {batch}" if batch else str(model) for model, batch in models]
    parts.append(time.strftime("%Y-%m-%d", time.gmtime(report.created)))
    return " · ".join(parts)
