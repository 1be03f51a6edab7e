"""`tfcluster demo`: a local cluster on this machine (2 workers training `mlp`, and the ps and chief the
`--mode` needs; between-graph by default; local transport, no SSH), watched in the dashboard; quitting
the dashboard stops the run.

`--headless --steps N` needs no terminal: it trains N steps, waits for the run to finish and prints
the final ClusterState (a table, or JSON with --json). Either way the run is stopped and purged at the
end (processes, run dir, the generated hosts.toml and the run record).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.errors import UsageError
from tfcluster.common import console, interrupt_on_hangup
from tfcluster.live import print_state, restart_policy

if TYPE_CHECKING:
    from orchestrator.monitor.reducer import ClusterState

DEMO_TOML = """\
# Written by `tfcluster demo`: one local "machine" running 1 ps and 2 CPU workers.
[cluster]
name = "demo"
mode = "{mode}"
base_port = {base_port}

[remote]
python = {python}
workdir = {workdir}

[[hosts]]
name = "local"
address = "127.0.0.1"
transport = "local"
roles = {roles}
workers = 2

[training]
model = "mlp"
batch_size = 64
steps = {steps}
progress_interval = 1.0
checkpoint_every_secs = 600.0
restart = "on-failure"
"""


# Every mode's demo cluster on the one local "machine": 2 workers, plus what the mode needs beside them.
DEMO_ROLES = {
    "between-graph": ["ps", "worker"],
    "in-graph": ["ps", "chief", "worker"],  # the chief runs the one client
    "multi-worker-mirrored": ["worker"],  # no ps: all-reduce between the workers
    "parameter-server-strategy": ["ps", "chief", "worker"],  # the chief is the coordinator
}


def demo_hosts_toml(mode: str, *, base_port: int, python: str, workdir: str, steps: int) -> str:
    if mode not in DEMO_ROLES:
        raise UsageError(f"demo --mode: {mode!r} is not one of {', '.join(DEMO_ROLES)}")
    return DEMO_TOML.format(mode=mode, roles=json.dumps(DEMO_ROLES[mode]), base_port=base_port,
                            python=json.dumps(python), workdir=json.dumps(workdir), steps=steps)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def _finished(st: ClusterState) -> bool:
    """Every task exited for good (the supervisor does not restart a task that exited 0)."""
    return bool(st.tasks) and all(t.state == "exited" for t in st.tasks.values())


def demo(
    headless: Annotated[bool, typer.Option("--headless", help="No dashboard: train, then print the final state.")] = False,
    steps: Annotated[
        int | None, typer.Option(min=1, help="Training steps (global; default 500 headless, 200000 with the dashboard).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="With --headless: print the final state as JSON.")] = False,
    interval: Annotated[float, typer.Option(min=0.2, max=10, help="Telemetry interval, seconds.")] = 1.0,
    timeout: Annotated[float, typer.Option(help="With --headless: give up after this many seconds.")] = 600.0,
    mode: Annotated[str, typer.Option(help=f"Replication mode: {', '.join(DEMO_ROLES)}.")] = "between-graph",
) -> None:
    """Start a local demo cluster (2 workers training mlp, plus a ps and a chief where the mode needs
    them) and open the dashboard on it."""
    from rich.markup import escape

    from orchestrator.monitor.collect import Collector, CollectorActions
    from orchestrator.plan.from_file import plan_file
    from orchestrator.run import records
    from orchestrator.run.launch import StartOptions, start
    from orchestrator.run.local_ports import free_port_block
    from orchestrator.run.stop import stop

    if as_json and not headless:
        raise UsageError("demo --json prints the final state of a --headless demo; add --headless")
    if steps is None:
        steps = 500 if headless else 200_000
    if mode not in DEMO_ROLES:
        raise UsageError(f"demo --mode: {mode!r} is not one of {', '.join(DEMO_ROLES)}")
    home = Path(tempfile.mkdtemp(prefix="tfcluster-demo-"))
    hosts = home / "hosts.toml"
    hosts.write_text(demo_hosts_toml(mode, base_port=free_port_block(5), python=sys.executable,
                                     workdir=str(home / "work"), steps=steps))
    err = console(stderr=True)
    roles = " + ".join(r if r != "worker" else "2 workers" for r in DEMO_ROLES[mode])
    err.print(f"demo: starting {roles} ({mode}) on this machine ({escape(str(hosts))})")
    result = start(plan_file(hosts), str(hosts), StartOptions(timeout=180.0))
    record = result.record
    err.print(f"demo: run {record.run_id} started in {result.seconds:.1f}s")
    collector = Collector.for_record(record, interval).start()
    ok = True
    try:
        if headless:
            deadline = time.monotonic() + timeout
            st = collector.poll()
            while time.monotonic() < deadline and not _finished(st):
                time.sleep(interval / 2)
                st = collector.poll()
            ok = _finished(st) and st.run_state == "finished"  # servers the run ended count as done
            print_state(st, as_json)
            if not _finished(st):
                err.print(f"demo: not finished after {timeout:g}s")
        else:
            from tui.app import DashboardApp

            DashboardApp(collector, CollectorActions(collector), interval=interval,
                         restart_policy=restart_policy(record)).run()
            interrupt_on_hangup()  # the app's loop reset the handlers on exit; the clean-up below needs them
    finally:
        collector.close()
        err.print(f"demo: stopping run {record.run_id}")
        stop(record, grace=3.0, purge=True)
        # A demo leaves nothing behind: its run dir, config and run record go with it.
        shutil.rmtree(home, ignore_errors=True)
        records.remove(record.run_id)
    if not ok:
        raise typer.Exit(1)
