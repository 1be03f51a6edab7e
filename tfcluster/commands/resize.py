"""`tfcluster resize RUN HOSTS`: bring a running run to the edited hosts file (issue 37, phase 1).

Thin: the hosts file is validated and planned as `start` plans it (orchestrator.plan.from_file), the change
is orchestrator.plan.resize_diff's, the work orchestrator.run.resize's. Refused in one line on stderr,
exit 2, before anything is reached: a Slurm run, a run that is not running, a change beyond the workers,
and (for now) a run of a built-in model. `--dry-run` prints the change and touches nothing.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from tfcluster.common import HostsFile, console

BUILTIN_NOT_YET = ("resize of a {mode} run of a built-in model is not built yet (only a run of your own "
                   "`[training] command` can be resized): nothing changed")


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
    from orchestrator.run.resize import ResizeOptions, restarted_by
    from orchestrator.run.resize import resize as resize_run
    from tfcluster import exit_codes

    record = records.load(run)
    if record.slurm is not None:
        raise UsageError(f"run {run} is a Slurm job: a resize needs a new allocation, which is a new job "
                         "(stop it and start again)")
    if record.status != "started":  # `partial` too: a host that never started has no supervisor to tell
        raise UsageError(f"run {run} is {record.shown_status}: only a run started on every host can be resized")
    planned = any_plan_file(hosts_file)
    if isinstance(planned, SlurmPlan):
        raise UsageError(f"{hosts_file}: slurm: a [slurm] file cannot resize a run started over SSH")
    change = plan_resize(record.plan, planned)
    if not record.plan.uses_user_command:
        raise UsageError(BUILTIN_NOT_YET.format(mode=record.plan.mode))
    out = console()
    if change.empty:
        out.print(f"run {run}: nothing to change (its workers are as {escape(str(hosts_file))} has them)")
        return
    restarted = restarted_by(change, restart_all)
    for line in change.lines() + [f"{n} restarts (--restart-all)" for n in restarted]:
        out.print(escape(line))
    if dry_run:
        out.print("dry run: nothing changed")
        return
    restarting = [*change.moved, *restarted]
    if restarting and not yes:
        if not sys.stdin.isatty():
            raise UsageError(f"this resize restarts {', '.join(restarting)}: pass --yes to go ahead")
        typer.confirm(f"restart {', '.join(restarting)}?", abort=True)
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
