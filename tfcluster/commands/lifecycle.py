"""`start`/`up`, `stop`/`down`, `status`, `ls`, `logs`: a run's life from the command line.

Thin: the work is in orchestrator.run.launch and orchestrator.run.lifecycle; this module only renders.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orchestrator.config.schema import Mode
from orchestrator.errors import UsageError
from orchestrator.monitor.status import TaskStatus
from orchestrator.monitor.status import status as run_status
from orchestrator.plan.from_file import any_plan_file
from orchestrator.plan.slurm import SlurmPlan
from orchestrator.run import launch, records
from orchestrator.run.logs import logs as follow_logs
from orchestrator.run.slurm_end import opener_for
from orchestrator.run.slurm_job import ENDED
from orchestrator.run.slurm_start import start_slurm
from orchestrator.run.stop import stop as stop_run
from tfcluster import exit_codes
from tfcluster.common import HostsFile, LatestRunId, widen
from tfcluster.live import open_dashboard, watch_status
from tfcluster.start_progress import StartProgress

console = Console(highlight=False)
MIN_WIDTH = 140  # for the tables when stdout is a pipe
err = Console(stderr=True, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("start")(start)
    app.command("up", hidden=True, help="Alias of `start`.")(start)
    app.command("stop")(stop)
    app.command("down", hidden=True, help="Alias of `stop`.")(stop)
    app.command("status")(status)
    app.command("ls")(list_runs)
    app.command("logs")(logs)


def start(
    hosts_file: HostsFile,
    mode: Annotated[
        Mode | None,
        typer.Option("--mode", help="Override hosts.toml's \\[cluster] mode."),
    ] = None,
    run: Annotated[str | None, typer.Option("--run", help="Name the run (default: <cluster>-<time>-<hex>).")] = None,
    allow_partial: Annotated[
        bool, typer.Option("--allow-partial", help="Keep the hosts that started when others fail.")
    ] = False,
    auto_ports: Annotated[
        bool, typer.Option("--auto-ports", help="When a planned port is in use on a host (another run?), pick free "
                           "ones instead of refusing (exit 2).")
    ] = False,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds until every task must be running.")] = 120.0,
    dash: Annotated[bool, typer.Option("--dash", help="Open the live dashboard once the run is up.")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Then follow the run until it ends; exit 0 only if it "
                                       "finished (1: failed or stopped, 3: a host lost).")] = False,
) -> None:
    """Ship the code, start every host's supervisor and wait until every task is running."""
    if wait and dash:
        raise UsageError("start: --wait and --dash both follow the run; choose one")
    planned = any_plan_file(hosts_file, mode)
    options = launch.StartOptions(timeout=timeout, allow_partial=allow_partial, run_name=run, auto_ports=auto_ports)
    with StartProgress(err, len(planned.nodes if isinstance(planned, SlurmPlan) else planned.hosts)) as progress:
        if isinstance(planned, SlurmPlan):  # submit, wait for the nodes, start through the job
            result = start_slurm(str(hosts_file), options, progress.report, progress.job, mode=mode)
        else:
            result = launch.start(planned, str(hosts_file), options, progress=progress.report)
    record = result.record
    out = widen(console, MIN_WIDTH)
    job = f", Slurm job {record.slurm.job_id}" if record.slurm else ""
    table = Table(header_style="bold", title=f"run {record.run_id} ({record.mode}{job})")
    for col in ("host", "tasks", "files uploaded", "supervisor pid", "state"):
        table.add_column(col)
    tasks_by_host: dict[str, list[str]] = {}
    for t in record.plan.tasks:
        tasks_by_host.setdefault(t.host, []).append(t.label)
    for h in record.hosts:
        o = result.outcomes[h.name]
        state = "running" if o.ok else f"not started: {o.error.one_line() if o.error else '?'}"
        table.add_row(h.name, " ".join(tasks_by_host.get(h.name, [])), f"{o.uploaded}/{o.shipped}",
                      str(o.supervisor_pid or "-"), escape(state))
    out.print(table)
    out.print(f"started [bold]{record.run_id}[/] in {result.seconds:.1f}s"
              + ("  (partial: some hosts failed)" if record.status == "partial" else ""))
    out.print(f"  tfcluster status {record.run_id}    tfcluster logs {record.run_id} -f    "
              f"tfcluster stop {record.run_id}")
    if dash:
        open_dashboard(record.run_id)
    if wait:
        raise typer.Exit(_follow_to_the_end(record))


def _follow_to_the_end(record: records.RunRecord, every: float = 2.0) -> int:
    """`start --wait`: a line whenever the run's state, counts or step change, until it ends."""
    t0, last_line = time.monotonic(), ""
    last: tuple[float, int | None] = (time.monotonic(), None)
    while True:
        st = run_status(record)
        counts: dict[str, int] = {}
        for t in st.tasks:
            counts[t.state] = counts.get(t.state, 0) + 1
        rate = ""
        if st.global_step is not None and last[1] is not None and time.monotonic() > last[0]:
            rate = f" ({(st.global_step - last[1]) / (time.monotonic() - last[0]):.1f} steps/s)"
        last = (time.monotonic(), st.global_step)
        step = "" if st.global_step is None else f"  step {st.global_step}{rate}"
        loss = "" if st.loss is None else f"  loss {st.loss:.4g}"
        tasks = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        job = f"  (Slurm job {st.slurm['job_id']}: {_job_text(st.slurm)})" if st.slurm else ""
        line = f"{st.state}{step}{loss}  [{tasks}]{job}"
        if line != last_line:
            err.print(f"[{time.monotonic() - t0:5.0f}s] {escape(line)}")
            last_line = line
        if st.state == "finished":
            return exit_codes.OK
        if st.state in ("failed", "stopped"):
            return exit_codes.UNREACHABLE if any(t.state == "lost" for t in st.tasks) else exit_codes.FAILED
        time.sleep(every)


def stop(
    run: LatestRunId = None,
    purge: Annotated[bool, typer.Option("--purge", help="Also remove the run directories on every host.")] = False,
    grace: Annotated[float, typer.Option(min=0, help="Seconds tasks get after SIGTERM before SIGKILL.")] = 10.0,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds per host command.")] = 15.0,
) -> None:
    """Stop the run on every host, kill what is left, and verify no process of it remains."""
    record = records.resolve(run)
    result = stop_run(record, grace=grace, timeout=timeout, purge=purge)
    table = Table(header_style="bold", title=f"stop {record.run_id}")
    for col in ("host", "result", "killed", "left running"):
        table.add_column(col)
    for h in record.hosts:
        r = result.get(h.name)
        if r is None:
            table.add_row(h.name, "nothing started", "-", "-")
        elif r.error:
            # "unreachable" only when the connection failed; a command that failed there is not that
            what = "unreachable" if r.reason in ("refused", "timeout", "unreachable", "lost") else "not stopped"
            table.add_row(h.name, f"[red]{what}[/]: {escape(r.error)}", "-", "?")
        else:
            what = "no run dir" if r.absent else ("stopped, purged" if r.purged else "stopped")
            left = ", ".join(f"{p.pid} {p.args[:40]}" for p in r.remaining) or "none"
            table.add_row(h.name, what if r.ok else f"[red]{what}[/]", str(len(r.killed)), escape(left))
    widen(console, MIN_WIDTH).print(table)
    cancelled = record.slurm is None or record.slurm.state in ENDED
    if record.slurm is not None:
        console.print(escape(record.notes[-1] if record.notes else f"Slurm job {record.slurm.job_id}"))
    if not all(r.ok for r in result.values()) or not cancelled:
        raise typer.Exit(1)


def _job_text(job: dict[str, str]) -> str:
    """`TIMEOUT: time limit`, `RUNNING`."""
    return f"{job['state'] or 'unknown to Slurm'}" + (f": {job['reason']}" if job.get("reason") not in ("", "None") else "")


def _state_text(t: TaskStatus) -> str:
    if t.state == "exited":
        how = f"code {t.exit_code}" if t.exit_code is not None else f"signal {t.signal}"
        why = {"user": ", stopped for good", "run": ", ended with the run", "stop": ", stopped"}.get(t.stopped_by or "", "")
        return f"exited ({how}{why})" + (" FAILED" if t.failed else "") + (f": {t.error}" if t.error else "")
    if t.state == "restarting" and t.error:
        return f"restarting (after: {t.error})"
    if t.no_progress_reported:
        return f"{t.state} (no progress reported)"
    return t.state


def status(
    run: LatestRunId = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds per host.")] = 15.0,
    watch: Annotated[bool, typer.Option("--watch", help="Live table from the telemetry agents until Ctrl-C.")] = False,
) -> None:
    """Every task's state, restarts, pid and host. Exit 1: a task (the run) failed; 3: a host unreachable
    or a task lost; 0 otherwise."""
    if watch:  # the dashboard's state, live (tfcluster/live.py)
        watch_status(run, as_json=as_json)
        return
    record = records.resolve(run)
    st = run_status(record, timeout=timeout)
    if as_json:
        sys.stdout.write(json.dumps(st.to_json(), indent=1) + "\n")
    else:
        table = Table(header_style="bold", title=f"run {escape(st.run_id)}: {st.state}")
        for col in ("task", "host", "state", "restarts", "pid"):
            table.add_column(col)
        for t in st.tasks:
            style = "red" if t.failed or t.state in ("unreachable", "lost") else ""
            text = escape(_state_text(t))
            left = f" ({t.restarts_left} left)" if t.restarts_left is not None and not t.final else ""
            table.add_row(t.name, escape(t.host), f"[{style}]{text}[/]" if style else text,
                          f"{t.restarts}{left}", str(t.pid or "-"))
        widen(console, MIN_WIDTH).print(table)
        if st.slurm:
            console.print(f"Slurm job {st.slurm['job_id']}: {escape(_job_text(st.slurm))}")
        for h in st.hosts:
            if h.error:
                console.print(f"host {h.host}: {escape(h.error)}")
            elif h.supervisor in ("starting", "running") and not h.supervisor_alive:
                console.print(f"host {h.host}: its supervisor is gone (killed?): tasks there are not restarted; "
                              f"`tfcluster stop {st.run_id}` still stops them")
    code = exit_codes.for_states([t.state for t in st.tasks], failed=st.failed or st.state == "failed")
    if code:
        raise typer.Exit(code)


def list_runs() -> None:
    """Known runs (from the local run record), oldest first."""
    known, skipped = records.list_runs()
    for warning in skipped:
        err.print(f"warning: {escape(warning)}")
    if not known:
        console.print("no runs yet")
        return
    table = Table(header_style="bold")
    for col in ("run", "cluster", "mode", "created", "hosts", "last known", "slurm job"):
        table.add_column(col)
    for r in known:
        job = f"{r.slurm.job_id} {_job_text(vars(r.slurm))}" if r.slurm else "-"
        table.add_row(escape(r.run_id), escape(r.cluster), escape(r.mode),
                      time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.created)),
                      escape(", ".join(h.name for h in r.hosts)), r.shown_status, escape(job))
    widen(console, MIN_WIDTH).print(table)


def logs(
    run: Annotated[str, typer.Argument(help="Run id (see `tfcluster ls`).")],
    tasks: Annotated[list[str] | None, typer.Argument(help="Tasks: worker:1, worker (all workers), ps:0@m0.")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep streaming new lines until Ctrl-C.")] = False,
    lines: Annotated[int | None, typer.Option("--lines", "-n", min=0, help="Only the last N lines.")] = None,
) -> None:
    """Task logs, each line prefixed `job:task@host`."""
    record = records.load(run)

    def emit(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how `logs -f` ends
        follow_logs(record, tasks or [], emit, follow=follow, lines=lines, opener=opener_for(record))
