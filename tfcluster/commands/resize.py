"""`tfcluster resize RUN HOSTS`: bring a running run to the edited hosts file (issue 37, phase 1).

Thin: the hosts file is validated and planned as `start` plans it (orchestrator.plan.from_file), the change
is orchestrator.plan.resize_diff's, the work orchestrator.run.resize's. Refused in one line on stderr,
exit 2, before anything is reached: what orchestrator.run.resizable refuses (a Slurm run, a run that is not
running: the dashboard's "remove this worker" asks the same rule), a change beyond the workers, and
`--restart-all` for a built-in model's run. An in-graph, multi-worker-mirrored, synchronous between-graph
or parameter-server-strategy run restarts its client, its group, or every kept task
(orchestrator.run.resize_restart): the command says so, and how many steps that may lose (the last
checkpoint's step and the run's, read from the chief's host), before it acts. Any restart is asked about
on a terminal; `--yes` goes ahead without asking; with neither, refused (exit 2). `--dry-run` prints the
change and touches nothing.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from tfcluster.common import HostsFile, console


def register(app: typer.Typer) -> None:
    app.command("resize")(resize)


def resize(
    run: Annotated[str, typer.Argument(help="Run id (see `tfcluster ls`).")],
    hosts_file: HostsFile,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would change; touch nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask before restarting tasks.")] = False,
    restart_all: Annotated[bool, typer.Option("--restart-all", help="Also restart every task that stays, with "
                                              "the new TF_CONFIG (your program's only).")] = False,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds until the resize is done.")] = 120.0,
) -> None:
    """Bring RUN to the edited hosts file: workers added, removed or moved; nothing else may change."""
    from rich.markup import escape

    from orchestrator.errors import HostError, UsageError
    from orchestrator.plan.from_file import any_plan_file
    from orchestrator.plan.resize_diff import plan_resize
    from orchestrator.plan.slurm import SlurmPlan
    from orchestrator.run import records
    from orchestrator.run.resizable import resize_refusal
    from orchestrator.run.resize import ResizeOptions, restarted_by
    from orchestrator.run.resize import resize as resize_run
    from orchestrator.run.resize_restart import mode_restarts, progress, restart_lines
    from tfcluster import exit_codes

    record = records.load(run)
    if refusal := resize_refusal(record):
        raise UsageError(refusal)
    planned = any_plan_file(hosts_file)
    if isinstance(planned, SlurmPlan):
        raise UsageError(f"{hosts_file}: slurm: a [slurm] file cannot resize a run started over SSH")
    change = plan_resize(record.plan, planned)
    if restart_all and not record.plan.uses_user_command:
        # A restarted ps loses its variables; the built-in tasks that stay need no new TF_CONFIG.
        raise UsageError("--restart-all restarts your own program's tasks: a built-in model's tasks that stay "
                         "take the new workers as they run: nothing changed")
    out = console()
    if change.empty:
        out.print(f"run {run}: nothing to change (its workers are as {escape(str(hosts_file))} has them)")
        return
    restarted = restarted_by(change, restart_all)
    # A built-in mode that restarts (the client, the group, every kept task): what, and the steps that may be lost.
    by_mode = restart_lines(change, progress(record)) if mode_restarts(change) else []
    said = by_mode or [f"{n} restarts (--restart-all)" for n in restarted]
    for line in change.lines() + said:
        out.print(escape(line))
    if dry_run:
        out.print("dry run: nothing changed")
        return
    restarting = [*change.moved, *restarted]
    lost = " (the steps since the last checkpoint may be lost)" if by_mode else ""
    if restarting and not yes:
        if not sys.stdin.isatty():
            raise UsageError(f"this resize restarts {', '.join(restarting)}{lost}: pass --yes to go ahead")
        typer.confirm(f"restart {', '.join(restarting)}{lost}?", abort=True)
    try:
        result = resize_run(record, change, str(hosts_file), ResizeOptions(timeout=timeout, restart_all=restart_all))
    except HostError as exc:  # a ResizeFailed too: its line says what was undone
        exc.exit_code = exit_codes.for_hosts([exc.reason])
        raise
    for host, what in result.left.items():
        console(stderr=True).print(f"warning: {escape(host)}: not verified gone: {escape(what)}")
    out.print(f"resized [bold]{escape(run)}[/] in {result.seconds:.1f}s: "
              f"{len(record.plan.tasks)} tasks on {len(record.hosts)} hosts")
    if result.left:
        raise typer.Exit(exit_codes.FAILED)
