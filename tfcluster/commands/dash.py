"""`tfcluster dash [RUN]`: the live dashboard; `--once --json` and `status --watch` for scripts and CI.

All three read the same ClusterState from the collector (one agent stream per host).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from orchestrator.errors import UsageError
from orchestrator.monitor.collect import Collector, CollectorActions
from orchestrator.monitor.reducer import ClusterState, task_sort_key
from orchestrator.run import records as runs
from tfcluster.common import LatestRunId

ONCE_HEARTBEATS = 3  # `--once` waits for this many intervals of data from every host


def register(app: typer.Typer) -> None:
    app.command("dash")(dash)
    from tfcluster.commands import lifecycle

    lifecycle.open_dashboard = open_dashboard  # `start --dash`


def state_table(st: ClusterState) -> Table:
    """The ClusterState as a Rich table (status --watch, dash --once without --json)."""
    from tui import format as fmt

    loss = "-" if st.loss is None else f"{st.loss:.4f}"
    counts = "  ".join(f"{n} {s}" for s, n in st.counts.items() if n)
    table = Table(header_style="bold", title=f"run {st.run_id}  step {fmt.number(st.global_step)}  loss {loss}  "
                                             f"{fmt.rate(st.examples_per_s)} ex/s  ({counts or 'no tasks'})")
    for col, just in (("host", "left"), ("task", "left"), ("state", "left"), ("steps/s", "right"),
                      ("ex/s", "right"), ("step", "right"), ("loss", "right"), ("restarts", "right"),
                      ("age", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for tv in sorted(st.tasks.values(), key=task_sort_key):
        table.add_row(tv.host, tv.name, fmt.state_text(tv.liveness, tv.exit_code),
                      fmt.rate(tv.steps_per_s), fmt.rate(tv.examples_per_s, 0), fmt.number(tv.global_step),
                      "-" if tv.loss is None else f"{tv.loss:.4f}", str(tv.restarts),
                      fmt.age(tv.age_s) + ("!" if tv.liveness == "unreachable" else ""))
    for p in sorted(st.ps.values(), key=lambda p: p.name):
        table.caption = (table.caption or "") + (
            f"{p.name}: in {fmt.byte_rate(p.measured_in)} (accounted {fmt.byte_rate(p.accounted_in)}), "
            f"out {fmt.byte_rate(p.measured_out)} (accounted {fmt.byte_rate(p.accounted_out)})\n")
    return table


def print_state(st: ClusterState, as_json: bool) -> None:
    """A final or one-off state on stdout: JSON for scripts, else the table (dash --once, demo --headless)."""
    if as_json:
        sys.stdout.write(json.dumps(st.to_json(), indent=1) + "\n")
    else:
        Console().print(state_table(st))


def collect_once(run: str | None, interval: float, timeout: float | None = None) -> ClusterState:
    record = runs.resolve(run)
    collector = Collector.for_record(record, interval).start()
    try:
        return collector.wait_for_data(ONCE_HEARTBEATS, timeout or 15.0 + 4 * interval)
    finally:
        collector.close()


def watch_status(run: str | None, interval: float = 1.0) -> None:
    """A Rich live table of the run until Ctrl-C (what `status --watch` shows)."""
    record = runs.resolve(run)
    collector = Collector.for_record(record, interval).start()
    console = Console()
    try:
        with Live(state_table(collector.poll()), console=console, refresh_per_second=4, transient=False) as live:
            while True:
                time.sleep(interval)
                live.update(state_table(collector.poll()))
    except KeyboardInterrupt:
        pass
    finally:
        collector.close()


def dash(
    run: LatestRunId = None,
    readonly: Annotated[bool, typer.Option("--readonly", help="Refuse restart/kill.")] = False,
    once: Annotated[bool, typer.Option("--once", help="Collect ~3 intervals, print the state, exit.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --once: print the state as JSON.")] = False,
    interval: Annotated[float, typer.Option(min=0.1, max=60, help="Agent sampling interval, seconds.")] = 1.0,
    prometheus: Annotated[int | None, typer.Option(help="Also export the state as Prometheus metrics on this port.")] = None,
    timeout: Annotated[float | None, typer.Option(help="With --once: give up waiting for data after this long.")] = None,
) -> None:
    """Watch a run live: per task step rates, liveness, PS traffic (measured and accounted), events."""
    if as_json and not once:
        raise typer.BadParameter("--json needs --once", param_hint="--json")
    if once:
        print_state(collect_once(run, interval, timeout), as_json)
        return
    open_dashboard(run, readonly=readonly, interval=interval, prometheus=prometheus)


def open_dashboard(run: str | None, *, readonly: bool = False, interval: float = 1.0,
                   prometheus: int | None = None) -> None:
    """The Textual dashboard on a run until the user quits; every agent stream is closed on the way out."""
    record = runs.resolve(run)
    collector = Collector.for_record(record, interval).start()
    exporter = None
    try:
        if prometheus is not None:
            from orchestrator.monitor.prometheus import PrometheusExporter

            try:
                exporter = PrometheusExporter(prometheus).start()
            except OSError as exc:
                raise UsageError(f"--prometheus {prometheus}: cannot listen ({exc.strerror or exc})") from exc
            source = exporter.wrap(collector)
        else:
            source = collector
        from tui.app import DashboardApp

        DashboardApp(source, CollectorActions(collector), readonly=readonly, interval=interval).run()
    finally:
        collector.close()
        if exporter is not None:
            exporter.close()
