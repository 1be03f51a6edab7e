"""`start`/`up`, `stop`/`down`, `status`, `ls`, `logs`: a run's life from the command line.

Thin: the work is in orchestrator.run (launch, stop, logs, records) and orchestrator.monitor.status;
this module only renders. Each command imports what it uses when it runs (Rich, Paramiko through the
orchestrator, pydantic through the plan), so `ls` or `--help` pay for none of the others'.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.config.modes import Mode
from tfcluster.common import HostsFile, LatestRunId, console, widen

if TYPE_CHECKING:
    from collections.abc import Sequence

    from orchestrator.monitor.reducer import ClusterState
    from orchestrator.monitor.task_state import TaskState
    from orchestrator.plan.model import HostPlan
    from orchestrator.run.records import RunRecord

MIN_WIDTH = 140  # for the tables when stdout is a pipe


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
        typer.Option("--mode", help="Override hosts.toml's [cluster] mode."),
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
                                       "finished (1: failed or stopped, 3: a host it needs lost, or the run "
                                       "stuck with a host lost).")] = False,
) -> None:
    """Ship the code, start every host's supervisor and wait until every task is running."""
    from rich.markup import escape
    from rich.table import Table

    from orchestrator.errors import HostError, UsageError
    from orchestrator.plan.from_file import any_plan_file
    from orchestrator.plan.slurm import SlurmPlan
    from orchestrator.run import launch, records
    from orchestrator.run.run_names import check_run_name
    from tfcluster import exit_codes
    from tfcluster.live import open_dashboard
    from tfcluster.start_progress import StartProgress

    if wait and dash:
        raise UsageError("start: --wait and --dash both follow the run; choose one")
    planned = any_plan_file(hosts_file, mode)
    # Bad input refused in one line before the progress display opens, and before any host is reached.
    if run is not None:
        check_run_name(run)
    records.writable_state_dir()
    options = launch.StartOptions(timeout=timeout, allow_partial=allow_partial, run_name=run, auto_ports=auto_ports)
    count = len(planned.nodes if isinstance(planned, SlurmPlan) else planned.hosts)
    try:
        with StartProgress(console(stderr=True), count) as progress:
            if isinstance(planned, SlurmPlan):  # submit, wait for the nodes, start through the job
                from orchestrator.run.slurm_start import start_slurm

                result = start_slurm(str(hosts_file), options, progress.report, progress.job, mode=mode)
            else:
                result = launch.start(planned, str(hosts_file), options, progress=progress.report)
    except HostError as exc:  # 3 when the hosts that failed could not be reached, 1 when one failed there
        exc.exit_code = exit_codes.for_hosts(exc.reasons if isinstance(exc, launch.StartFailed) else [exc.reason])
        raise
    record = result.record
    out = widen(console(), MIN_WIDTH)
    job = f", Slurm job {record.slurm.job_id}" if record.slurm else ""
    table = Table(header_style="bold", title=f"run {record.run_id} ({record.mode}{job})")
    for col in ("host", "tasks", "files uploaded", "supervisor pid", "state"):
        table.add_column(col)
    tasks_by_host: dict[str, list[str]] = {}
    for t in record.plan.tasks:
        tasks_by_host.setdefault(t.host, []).append(t.name)
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


def _follow_to_the_end(record: RunRecord) -> int:
    """`start --wait`: a line whenever the run's state, counts or step change, then the ending's own line
    (orchestrator/monitor/follow.py decides when and why it ends)."""
    from rich.markup import escape

    from orchestrator.monitor.follow import follow
    from tfcluster import exit_codes

    outcomes = {"finished": exit_codes.OK, "failed": exit_codes.FAILED, "stopped": exit_codes.FAILED,
                "lost": exit_codes.UNREACHABLE}
    t0, last_line = time.monotonic(), ""
    last: tuple[float, int | None] = (time.monotonic(), None)

    def show(st: ClusterState) -> None:
        nonlocal last, last_line
        rate = ""
        if st.global_step is not None and last[1] is not None and time.monotonic() > last[0]:
            rate = f" ({(st.global_step - last[1]) / (time.monotonic() - last[0]):.1f} steps/s)"
        last = (time.monotonic(), st.global_step)
        step = "" if st.global_step is None else f"  step {st.global_step}{rate}"
        loss = "" if st.loss is None else f"  loss {st.loss:.4g}"
        tasks = ", ".join(f"{n} {s}" for s, n in sorted(st.counts.items()) if n)
        job = f"  (Slurm job {st.slurm['job_id']}: {job_text(st.slurm)})" if st.slurm else ""
        line = f"{st.run_state}{step}{loss}  [{tasks}]{job}"
        if line != last_line:
            console(stderr=True).print(f"[{time.monotonic() - t0:5.0f}s] {escape(line)}")
            last_line = line

    ending = follow(record.run_id, show)
    console(stderr=True).print(f"[{time.monotonic() - t0:5.0f}s] {escape(ending.why)}")
    return outcomes[ending.outcome]


def stop(
    run: LatestRunId = None,
    purge: Annotated[bool, typer.Option("--purge", help="Also remove the run directories on every host.")] = False,
    grace: Annotated[float, typer.Option(min=0, help="Seconds tasks get after SIGTERM before SIGKILL.")] = 10.0,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds per host command.")] = 15.0,
) -> None:
    """Stop the run on every host, kill what is left, and verify no process of it remains."""
    from rich.markup import escape
    from rich.table import Table

    from orchestrator.run import records, resize_pending
    from orchestrator.run.slurm_job import ENDED
    from orchestrator.run.stop import stop as stop_run
    from tfcluster import exit_codes

    record = records.resolve(run)
    result = stop_run(record, grace=grace, timeout=timeout, purge=purge)
    table = Table(header_style="bold", title=f"stop {record.run_id}")
    for col in ("host", "result", "killed", "left running"):
        table.add_column(col)
    # A resize's new hosts too (run/resize_pending.py): a resize killed half-way may have left tasks there.
    for name in [*(h.name for h in record.hosts), *resize_pending.pending_hosts(record)]:
        r = result.get(name)
        if r is None:
            table.add_row(name, "nothing started", "-", "-")
        elif r.error:
            # "unreachable" only when the connection failed; a command that failed there is not that
            what = "unreachable" if r.reason in exit_codes.CONNECT_REASONS else "not stopped"
            table.add_row(name, f"[red]{what}[/]: {escape(r.error)}", "-", "?")
        else:
            what = "no run dir" if r.absent else ("stopped, purged" if r.purged else "stopped")
            left = ", ".join(f"{p.pid} {p.args[:40]}" for p in r.remaining)
            if r.unsure:  # a process that dropped the run's marker may be left there: never say "none"
                left = "; ".join(x for x in (left, f"unknown: {r.unsure}") if x)
            left = left or "none"
            table.add_row(name, what if r.ok else f"[red]{what}[/]", str(len(r.killed)), escape(left))
    widen(console(), MIN_WIDTH).print(table)
    _close_shared(record.plan.hosts)
    cancelled = record.slurm is None or record.slurm.state in ENDED
    if record.slurm is not None:
        console().print(escape(record.notes[-1] if record.notes else f"Slurm job {record.slurm.job_id}"))
    # Each host not stopped: why (None: reached, and something of the run is left there); a Slurm job not
    # cancelled is a failure too. 3 only when every such host could not be reached (tfcluster/exit_codes.py).
    failures: list[str | None] = [r.reason if r.error else None for r in result.values() if not r.ok]
    code = exit_codes.for_hosts(failures + ([] if cancelled else [None]))
    if code:
        raise typer.Exit(code)


def _close_shared(hosts: Sequence[HostPlan]) -> None:
    """The run is over: its hosts' shared ssh connections (client = "openssh") are closed too."""
    from rich.markup import escape

    from orchestrator.transport.shared import close_shared

    closed = close_shared(hosts, end_sessions=False)  # another run's `dash` through them goes on
    if closed:
        console().print(escape(f"closed the shared ssh connections to {', '.join(closed)}"))


def job_text(job: dict[str, str]) -> str:
    """`TIMEOUT: time limit`, `RUNNING`."""
    return f"{job['state'] or 'unknown to Slurm'}" + (f": {job['reason']}" if job.get("reason") not in ("", "None") else "")


def _state_text(t: TaskState) -> str:
    if t.state == "exited":
        how = f"code {t.exit_code}" if t.exit_code is not None else f"signal {t.signal}"
        why = {"user": ", stopped for good", "run": ", ended with the run", "stop": ", stopped"}.get(t.stopped_by or "", "")
        return f"exited ({how}{why})" + (" FAILED" if t.failed else "") + (f": {t.error}" if t.error else "")
    if t.state == "restarting" and t.error:
        return f"restarting (after: {t.error})"
    if t.no_progress_reported:
        return f"{t.state} (no progress reported)"
    return t.state


def _print_status(st: ClusterState) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(header_style="bold", title=f"run {escape(st.run_id)}: {st.run_state}")
    for col in ("task", "host", "state", "restarts", "pid"):
        table.add_column(col)
    for t in st.tasks.values():  # in plan order
        style = "red" if t.failed or t.state in ("unreachable", "lost") else ""
        text = escape(_state_text(t))
        left = f" ({t.restarts_left} left)" if t.restarts_left is not None and not t.final else ""
        table.add_row(t.name, escape(t.host), f"[{style}]{text}[/]" if style else text,
                      f"{t.restarts}{left}", str(t.pid or "-"))
    out = widen(console(), MIN_WIDTH)
    out.print(table)
    if st.slurm:
        out.print(f"Slurm job {st.slurm['job_id']}: {escape(job_text(st.slurm))}")
    for h in st.hosts.values():
        if h.error:
            out.print(f"host {h.name}: {escape(h.error)}")
        elif h.supervisor_state in ("starting", "running") and h.supervisor_alive is False:
            out.print(f"host {h.name}: its supervisor is gone (killed?): tasks there are not restarted; "
                      f"`tfcluster stop {st.run_id}` still stops them")


def status(
    run: LatestRunId = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout (as dash --once --json).")] = False,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds per host.")] = 15.0,
    watch: Annotated[bool, typer.Option("--watch", help="Live table from the telemetry agents until Ctrl-C.")] = False,
) -> None:
    """Every task's state, restarts, pid and host. Exit 1: a task (the run) failed; 3: a host unreachable
    or a task lost; 0 otherwise."""
    from tfcluster import live

    if watch:  # the dashboard's state, live
        live.watch_status(run, as_json=as_json)
        return
    st = live.read_once(run, timeout)
    if as_json:
        live.print_json(st)
    else:
        _print_status(st)
    code = live.exit_code(st)
    if code:
        raise typer.Exit(code)


def list_runs() -> None:
    """Known runs (from the local run record), oldest first."""
    from rich.markup import escape
    from rich.table import Table

    from orchestrator.run import records

    known, skipped = records.list_summaries()
    for warning in skipped:
        console(stderr=True).print(f"warning: {escape(warning)}")
    if not known:
        console().print("no runs yet")
        return
    table = Table(header_style="bold")
    for col in ("run", "cluster", "mode", "created", "hosts", "last known", "slurm job"):
        table.add_column(col)
    for r in known:
        job = f"{r.slurm.job_id} {job_text(vars(r.slurm))}" if r.slurm else "-"
        table.add_row(escape(r.run_id), escape(r.cluster), escape(r.mode),
                      time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.created)),
                      escape(", ".join(r.hosts)), r.shown_status, escape(job))
    widen(console(), MIN_WIDTH).print(table)


def logs(
    run: Annotated[str, typer.Argument(help="Run id (see `tfcluster ls`).")],
    tasks: Annotated[list[str] | None, typer.Argument(help="Tasks: worker:1, worker (all workers), ps:0@m0.")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep streaming new lines until Ctrl-C.")] = False,
    lines: Annotated[int | None, typer.Option("--lines", "-n", min=0, help="Only the last N lines.")] = None,
) -> None:
    """Task logs, each line prefixed `job:task@host`."""
    from orchestrator.plan.slurm import before_allocation
    from orchestrator.run import records
    from orchestrator.run.logs import logs as follow_logs
    from orchestrator.run.slurm_end import live_opener, opener_for, placed

    record = records.load(run)

    def emit(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how `logs -f` ends
        if follow:
            record = placed(record, lambda said: emit(f"-- {said}"))
        if before_allocation(record.plan):  # `logs` without -f while the job waits, or a job that never ran
            why = "is pending" if record.status == "starting" else f"never had nodes (run {record.status})"
            emit(f"-- run {run}: its Slurm job {why}: no task has run, no log")
            return
        follow_logs(record, tasks or [], emit, follow=follow, lines=lines,
                    opener=live_opener(record) if follow else opener_for(record))
