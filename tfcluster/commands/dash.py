"""`tfcluster dash [RUN]`: the live dashboard; `--once --json` and `status --watch` for scripts and CI.

All three read the same ClusterState from the collector (one agent stream per host): tfcluster/live.py.
"""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.errors import UsageError
from tfcluster import exit_codes
from tfcluster.common import LatestRunId
from tfcluster.live import collect_once, open_dashboard, open_tensorboard_url, print_state


def register(app: typer.Typer) -> None:
    app.command("dash")(dash)


def dash(
    run: LatestRunId = None,
    readonly: Annotated[bool, typer.Option("--readonly", help="Refuse restart, kill and stop for good.")] = False,
    once: Annotated[bool, typer.Option("--once", help="Collect ~3 intervals, print the state, exit.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --once: print the state as JSON.")] = False,
    interval: Annotated[float, typer.Option(min=0.1, max=60, help="Agent sampling interval, seconds.")] = 1.0,
    prometheus: Annotated[int | None, typer.Option(help="Also export the state as Prometheus metrics on this port.")] = None,
    timeout: Annotated[float | None, typer.Option(help="With --once: give up waiting for data after this long.")] = None,
) -> None:
    """Watch a run live: per task step rates, liveness, PS traffic (measured and accounted), events;
    `t` opens the run's TensorBoard (see `tfcluster tensorboard`). With --once (and the URL of the run's
    TensorBoard when one is open): exit 1 when a task failed, 3 when a host is unreachable or a task lost."""
    if as_json and not once:
        raise UsageError("dash --json needs --once (the live dashboard is a terminal app)")
    if once and prometheus is not None:
        raise UsageError("dash --prometheus serves metrics while the dashboard runs; it cannot go with --once")
    if once:
        st = collect_once(run, interval, timeout)
        print_state(st, as_json, tensorboard=open_tensorboard_url(st.run_id))
        failed = any(t.liveness == "exited" and t.exit_code not in (0, None) and t.stopped_by is None
                     for t in st.tasks.values())
        code = exit_codes.for_states([t.liveness for t in st.tasks.values()], failed=failed)
        if code:
            raise typer.Exit(code)
        return
    open_dashboard(run, readonly=readonly, interval=interval, prometheus=prometheus)


