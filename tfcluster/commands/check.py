"""`tfcluster check hosts.toml`: is every host reachable and ready for the plan? Exit 0 if so, 1 when a
host is not ready, 3 when one cannot be reached (tfcluster/exit_codes.py)."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from tfcluster.common import HostsFile, console, load_plan, widen

if TYPE_CHECKING:
    from rich.console import Console

    from orchestrator.plan.model import ClusterPlan
    from orchestrator.run.check import CheckReport, HostCheck

MIN_WIDTH = 140


def register(app: typer.Typer) -> None:
    app.command("check")(check)


def check(
    hosts_file: HostsFile,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout, nothing else.")] = False,
    timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds each host's probe may take once connected.")
    ] = 30.0,
    import_tf: Annotated[
        bool, typer.Option("--import-tf", help="Import TensorFlow on each host now (slow), even when its answer is "
                           "cached or the plan does not need it (the built-in trainers and the TF2 modes always check it).")
    ] = False,
    close: Annotated[
        bool, typer.Option("--close", help='Close the hosts\' shared ssh connections (client = "openssh") and exit.')
    ] = False,
) -> None:
    """Connect to every host in parallel and check SSH, python, TensorFlow, GPUs, ports, disk and clock.

    With client = "openssh" at a terminal, each host's shared connection is opened first, one host at a
    time, so a password or second factor can be typed once; later commands reuse it without asking."""
    from rich.markup import escape

    from orchestrator.run.check import local_tf_version, run_check
    from orchestrator.run.ship import shipped_bytes
    from orchestrator.transport.factory import transport_for
    from tfcluster import exit_codes

    plan = load_plan(hosts_file)
    out = widen(console(), MIN_WIDTH)
    if close:
        _close_shared(plan)
        return
    if not as_json and sys.stdin.isatty() and sys.stderr.isatty():
        _open_shared(plan)

    def progress(row: HostCheck) -> None:
        if not as_json and out.is_terminal:
            console(stderr=True).print(f"  {escape(row.host)}: {'ready' if row.ready else 'NOT ready'} "
                                       f"({row.duration_s:.1f}s)")

    report = run_check(
        plan, transport_for, timeout=timeout, import_tf=import_tf, orchestrator_tf=local_tf_version(),
        on_result=progress,
        ship_bytes=shipped_bytes(plan.training.sync, os.path.dirname(os.path.abspath(hosts_file)), str(hosts_file)),
    )
    if as_json:
        sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
    else:
        print_report(out, report)
    unreachable = any(h.failure in ("refused", "timeout", "unreachable") for h in report.hosts)
    raise typer.Exit(exit_codes.UNREACHABLE if unreachable else exit_codes.OK if report.ready else exit_codes.FAILED)


def _close_shared(plan: ClusterPlan) -> None:
    from rich.markup import escape

    from orchestrator.transport.shared import close_shared

    closed = close_shared(plan.hosts)
    console().print(escape(f"closed the shared ssh connections to {', '.join(closed)}") if closed
                    else "no shared ssh connection was open")


def _open_shared(plan: ClusterPlan) -> None:
    """Open the shared connections before the parallel probes, with the terminal (one host at a time)."""
    from rich.markup import escape

    from orchestrator.transport.shared import Opened, open_interactively

    err = console(stderr=True)

    def said(row: Opened) -> None:
        if row.error is not None:
            err.print(f"  {escape(row.error.one_line())}")
        else:
            err.print(f"  {escape(row.host)}: {'reusing the' if row.reused else 'opened a'} shared ssh connection; "
                      "later commands reuse it without asking while it lasts (`check --close` or `stop` closes it)")

    open_interactively(plan.hosts, on_opened=said)


def _yes_no(value: bool | None, failure: str | None = None) -> str:
    from rich.markup import escape

    if value is None:
        return "[dim]-[/]"
    if value:
        return "[green]yes[/]"
    return f"[red]no[/] ({escape(failure)})" if failure else "[red]no[/]"


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def print_report(console: Console, report: CheckReport) -> None:
    from rich.markup import escape
    from rich.table import Table

    tf_ref = report.tf_reference or "?"
    whose = "orchestrator" if report.orchestrator_tf else "hosts"
    console.print(f"[bold]cluster[/] [bold cyan]{escape(report.cluster)}[/]  ·  TensorFlow {tf_ref} ({whose})")
    table = Table(header_style="bold")
    for column in ("host", "reachable", "auth", "python", "tensorflow", "GPUs found/planned", "ports free",
                   "disk free", "clock offset", "ready"):
        table.add_column(column, no_wrap=column in ("host", "ready"))
    for h in report.hosts:
        connect_failure = h.failure if not h.reachable else None
        auth_failure = h.failure if h.reachable and not h.auth else None
        python = escape(h.python_version or "-") if h.python_found else ("[red]missing[/]" if h.auth else "-")
        if h.tf_version is None:
            tf = "[red]missing[/]" if h.python_found else "-"
        else:
            tf = escape(h.tf_version) if h.tf_matches in (True, None) else f"[red]{escape(h.tf_version)}[/]"
        if h.gpus_found is None:
            gpus = "-"
        else:
            planned = ",".join(map(str, h.gpus_planned)) or "none"
            gpus = f"{h.gpus_found} / {planned}"
            if h.tf_gpus_seen is not None:  # what TensorFlow saw of them (built-in trainers only)
                seen = f"TF sees {h.tf_gpus_seen}"
                gpus += f", {seen}" if h.tf_gpu_cause is None else f", [red]{seen}[/]"
        busy = [p for p, why in h.ports.items() if why]
        ports = "-" if not h.ports else ("[green]all[/]" if not busy else "[red]busy: " + ", ".join(map(str, busy)) + "[/]")
        clock = "-" if h.clock_offset_s is None else f"{h.clock_offset_s * 1000:+.0f} ms"
        table.add_row(
            escape(h.host), _yes_no(h.reachable, connect_failure), _yes_no(h.auth if h.reachable else None, auth_failure),
            python, tf, gpus, ports, _bytes(h.disk_free_bytes), clock,
            "[green]ready[/]" if h.ready else "[bold red]NOT READY[/]",
        )
    console.print(table)
    for h in report.hosts:
        for problem in h.problems:
            console.print(f"[red]✗[/] {escape(h.host)}: {escape(problem)}")
        for warning in h.warnings:
            console.print(f"[yellow]![/] {escape(h.host)}: {escape(warning)}")
    for warning in report.warnings:
        console.print(f"[yellow]![/] {escape(warning)}")
    for note in report.notes:
        console.print(f"[cyan]i[/] {escape(note)}")
    ready = sum(h.ready for h in report.hosts)
    verdict = "[green]all hosts ready[/]" if report.ready else f"[red]{len(report.hosts) - ready} host(s) not ready[/]"
    console.print(f"{verdict}  ({ready}/{len(report.hosts)} ready, {report.duration_s:.1f}s)")
