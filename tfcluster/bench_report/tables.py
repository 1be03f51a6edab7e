"""The bench report in the terminal: the results table, the resize table, the straggler
effect, the PS model, a comparison.

Rich tables of orchestrator.bench.summary's rows; every figure is a median over the repeats that
finished (min..max shown where repeats differ). Failed cells are listed with their error.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orchestrator.bench.report import BenchReport
from orchestrator.bench.summary import ResizeEvent, resize_events, rows, straggler_effects
from orchestrator.plan.names import task_name

MB = 1e6


def num(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "-"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f} %"


def results_table(report: BenchReport) -> Table:
    table = Table(header_style="bold", title=f"tfcluster bench: {escape(report.cluster)}")
    for col, justify in (("mode", "left"), ("workers", "right"), ("variant", "left"), ("ok", "right"),
                         ("examples/s", "right"), ("updates/s", "right"), ("steps/s per worker", "left"),
                         ("client CPU", "right"), ("to loss", "right"), ("PS MB/s measured / accounted", "left"),
                         ("PS ceiling steps/s: predicted / measured", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows(report):
        n = r.ok + len(r.failed)
        rng = r.examples_range
        examples = num(r.examples_per_s) + (f" ({num(rng[0])}..{num(rng[1])})" if rng and rng[0] != rng[1] else "")
        workers = ", ".join(f"{w.split('-')[-1]}: {num(v)}" for w, v in r.per_worker.items())
        ps = "; ".join(f"{p} {num(r.ps_measured_Bps.get(p, 0) / MB)} / {num(r.ps_accounted_Bps.get(p, 0) / MB)}"
                       f" ({num(r.measured_over_accounted(p))})" for p in sorted(set(r.ps_measured_Bps)
                                                                                  | set(r.ps_accounted_Bps)))
        ceiling = "-" if r.predicted_steps_per_s is None else (
            f"{num(r.predicted_steps_per_s)} / {num(r.measured_steps_per_s)} ({pct(r.measured_over_predicted)})")
        table.add_row(r.mode, str(r.workers), r.variant, f"{r.ok}/{n}", examples, num(r.updates_per_s),
                      workers or "-", "-" if r.client_cpu_pct is None else f"{r.client_cpu_pct:.0f} %",
                      "-" if r.time_to_loss_s is None else f"{r.time_to_loss_s:.1f} s", ps or "-", ceiling)
    return table


def failures(report: BenchReport) -> list[str]:
    return [f"{c.cell.key}: {c.status}: {c.error}" for c in report.cells if not c.ok]


def straggler_lines(report: BenchReport) -> list[str]:
    spec = report.spec.get("straggler")
    if not isinstance(spec, dict):
        return []
    task = spec["task"]
    name = task_name(task["job"], int(task["index"]))
    out = []
    for e in straggler_effects(report, name):
        others = ", ".join(f"{w} at {pct(v)}" for w, v in e.others.items())
        slow = e.ratios.get(name)
        out.append(f"straggler {name} ×{spec['factor']:g}, {e.mode} ({e.workers} workers): "
                   f"the others {others or '-'} of their rate without it; the straggler at {pct(slow)}")
    return out


def kill_lines(report: BenchReport) -> list[str]:
    out = []
    for c in report.cells:
        k = c.figures.kill if c.figures else None
        if not k:
            continue
        back = k.get("progress_again_after_s")
        out.append(f"kill {k['task']} in {c.cell.key}: examples/s {num(k['examples_per_s_before'])} before, "
                   f"{num(k['examples_per_s_after'])} after; "
                   + (f"stepping again {back:.1f} s after the kill" if back is not None else "not stepping again")
                   + f" ({k['restarts']} restart(s))")
    return out


def link_line(report: BenchReport) -> str:
    link = report.link
    parts = [f"link limit {num(report.capacity_Bps / MB)} MB/s in+out ({link.get('source')}, "
             f"{num(link.get('nic_gbps'))} Gb/s each way)"]
    for m in link.get("measurements", []):
        parts.append(f"{m['method']} {num(m['both_ways_Bps'] / MB)} MB/s")
    return "; ".join(parts)


def scaling_lines(report: BenchReport) -> list[str]:
    """The PS ceiling per cell group, and the PS count that lifts it where it binds."""
    out = []
    for r in rows(report):
        c = next((c for c in report.cells if c.cell.mode == r.mode and c.cell.workers == r.workers
                  and c.cell.variant == r.variant and c.ceiling), None)
        if c is None or c.ceiling is None or r.variant != "baseline":
            continue
        ceiling = float(c.ceiling["steps_per_s_per_worker"])
        measured = r.measured_steps_per_s
        bound = measured is not None and measured >= 0.8 * ceiling
        out.append(f"{r.mode} ({r.workers} workers): {c.ceiling['busiest_ps']} holds "
                   f"{num(c.ceiling['bytes_on_ps'][c.ceiling['busiest_ps']] / MB)} MB, moves "
                   f"{c.ceiling['transfers_per_step']:g}× that per worker step → ceiling {num(ceiling)} steps/s "
                   f"per worker; measured {num(measured)}" + (" (PS-bound)" if bound else ""))
    return out


RESIZE_COLUMNS = ("mode", "workers", "event", "resize took", "stepping again after", "longest without a step",
                  "steps lost", "restarted", "examples/s before", "examples/s after")


def _seconds(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} s"


def _resize_row(e: ResizeEvent) -> list[str]:
    after = e.workers + (1 if e.event == "join" else -1)
    what = f"{e.event} {', '.join(e.tasks)}" + (f" ({', '.join(e.hosts)})" if e.hosts else "")
    stall = _seconds(e.stall_s) + ("" if e.resumed else " (not again)")
    return [e.mode + (f" #{e.repeat + 1}" if e.repeat else ""), f"{e.workers} → {after}", what, _seconds(e.took_s),
            _seconds(e.stepping_after_s), stall, "-" if e.steps_lost is None else str(e.steps_lost),
            ", ".join(e.restarted) or "-", num(e.examples_before), num(e.examples_after)]


def resize_table(report: BenchReport) -> Table | None:
    """One row per join and leave of every finished resize cell (summary.resize_events): what changed, how
    long the resize took, until every trainer stepped again, the longest time the global step did not
    advance around it, the steps lost, examples/s before and after. None when there is no such cell; a mode
    the resize refused is in the failed-cells lines."""
    events = resize_events(report)
    if not events:
        return None
    table = Table(header_style="bold", title=f"resize: a worker joins, then leaves ({escape(report.cluster)})")
    for col in RESIZE_COLUMNS:
        table.add_column(col, justify="left" if col in ("mode", "event", "restarted") else "right")
    for e in events:
        table.add_row(*(escape(c) for c in _resize_row(e)))
    return table


def print_report(console: Console, report: BenchReport) -> None:
    console.print(results_table(report))
    if (resized := resize_table(report)) is not None:
        console.print(resized)
    for line in [link_line(report), *scaling_lines(report), *straggler_lines(report), *kill_lines(report)]:
        console.print(escape(line), soft_wrap=True)
    for line in failures(report):
        console.print(f"[red]failed[/] {escape(line)}", soft_wrap=True)
    load = report.machine
    console.print(f"machine: {load.get('cpus')} CPUs, load before {load.get('load_before')}, after "
                  f"{load.get('load_after')}" + ("  (interrupted: finished cells only)" if report.interrupted else ""))


def compare_table(a: BenchReport, b: BenchReport, a_name: str, b_name: str) -> Table:
    table = Table(header_style="bold", title=f"{escape(a_name)} vs {escape(b_name)} (ratio = b / a)")
    for col in ("mode", "workers", "variant", "examples/s a", "examples/s b", "ratio", "updates/s a",
                "updates/s b", "ratio", "steps/s per worker a", "b", "ratio"):
        table.add_column(col, justify="left" if col in ("mode", "variant") else "right")
    rows_b = {r.key: r for r in rows(b)}
    for ra in rows(a):
        rb = rows_b.get(ra.key)
        if rb is None:
            continue
        table.add_row(ra.mode, str(ra.workers), ra.variant, num(ra.examples_per_s), num(rb.examples_per_s),
                      num(_ratio(rb.examples_per_s, ra.examples_per_s)), num(ra.updates_per_s), num(rb.updates_per_s),
                      num(_ratio(rb.updates_per_s, ra.updates_per_s)), num(ra.measured_steps_per_s),
                      num(rb.measured_steps_per_s), num(_ratio(rb.measured_steps_per_s, ra.measured_steps_per_s)))
    return table


def _ratio(b: float | None, a: float | None) -> float | None:
    return None if a is None or b is None or not a else b / a

