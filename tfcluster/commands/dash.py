"""`tfcluster dash [RUN]`: the live dashboard; `--once [--json]` for scripts and CI.

`--once` is `status`'s one read of every host, shown as the dashboard's table or as the one JSON
document (the same as `status --json`); the dashboard itself starts from that read and then follows the
agents' streams (tfcluster/live.py).
"""

from __future__ import annotations

from typing import Annotated

import typer

from tfcluster.common import LatestRunId


def register(app: typer.Typer) -> None:
    app.command("dash")(dash)


def dash(
    run: LatestRunId = None,
    readonly: Annotated[bool, typer.Option("--readonly", help="Refuse restart, kill and stop for good.")] = False,
    once: Annotated[bool, typer.Option("--once", help="Read every host once, print the state, exit.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --once: print the state as JSON (as status --json).")] = False,
    interval: Annotated[float, typer.Option(min=0.1, max=60, help="Agent sampling interval, seconds.")] = 1.0,
    prometheus: Annotated[int | None, typer.Option(help="Also export the state as Prometheus metrics on this port.")] = None,
    timeout: Annotated[float | None, typer.Option(help="With --once: seconds per host.")] = None,
) -> None:
    """Watch a run live: per task step rates, liveness, PS traffic (measured and accounted), events;
    `t` opens the run's TensorBoard (see `tfcluster tensorboard`). With --once (and the URL of the run's
    TensorBoard when one is open): exit 1 when a task failed, 3 when a host is unreachable or a task lost."""
    from orchestrator.errors import UsageError
    from tfcluster import live

    if as_json and not once:
        raise UsageError("dash --json needs --once (the live dashboard is a terminal app)")
    if once and prometheus is not None:
        raise UsageError("dash --prometheus serves metrics while the dashboard runs; it cannot go with --once")
    if once:
        st = live.read_once(run, timeout or 15.0)
        live.print_state(st, as_json)
        code = live.exit_code(st)
        if code:
            raise typer.Exit(code)
        return
    live.open_dashboard(run, readonly=readonly, interval=interval, prometheus=prometheus)
