"""The resize figures in the terminal: one row per join and leave of every finished resize cell.

orchestrator.bench.summary.resize_events' data: what changed, how long the resize took, how long until every
trainer stepped again, the longest time the global step did not advance around it, the steps lost, and the
cluster's examples/s before and after it. A mode the resize refused is in the failed-cells lines.
"""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from orchestrator.bench.report import BenchReport
from orchestrator.bench.summary import ResizeEvent, resize_events
from tfcluster.bench_report.tables import num

COLUMNS = ("mode", "workers", "event", "resize took", "stepping again after", "longest without a step",
           "steps lost", "restarted", "examples/s before", "examples/s after")


def seconds(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} s"


def cells(e: ResizeEvent) -> list[str]:
    after = e.workers + (1 if e.event == "join" else -1)
    what = f"{e.event} {', '.join(e.tasks)}" + (f" ({', '.join(e.hosts)})" if e.hosts else "")
    stall = seconds(e.stall_s) + ("" if e.resumed else " (not again)")
    return [e.mode + (f" #{e.repeat + 1}" if e.repeat else ""), f"{e.workers} → {after}", what, seconds(e.took_s),
            seconds(e.stepping_after_s), stall, "-" if e.steps_lost is None else str(e.steps_lost),
            ", ".join(e.restarted) or "-", num(e.examples_before), num(e.examples_after)]


def resize_table(report: BenchReport) -> Table | None:
    """None when the report has no finished resize cell."""
    events = resize_events(report)
    if not events:
        return None
    table = Table(header_style="bold", title=f"resize: a worker joins, then leaves ({escape(report.cluster)})")
    for col in COLUMNS:
        table.add_column(col, justify="left" if col in ("mode", "event", "restarted") else "right")
    for e in events:
        table.add_row(*(escape(c) for c in cells(e)))
    return table
