"""`tensorboard` and `pull`: a run's results on this machine. Thin: the work is in orchestrator/results/.
Their modules are imported inside the commands (they are not needed to start the CLI)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.errors import HostError
from tfcluster import exit_codes
from tfcluster.common import LatestRunId, console

if TYPE_CHECKING:
    from orchestrator.results.remote_files import Fetched


def escape(text: str) -> str:
    """Rich's markup escape, imported when a command prints (not when the CLI starts)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def byte_size(n: float) -> str:
    from tui.format import byte_size as size

    return size(n)


def register(app: typer.Typer) -> None:
    app.command("tensorboard")(tensorboard)
    app.command("pull")(pull)


def tensorboard(
    run: LatestRunId = None,
    port: Annotated[int | None, typer.Option(min=1, max=65535, help="Port on 127.0.0.1 (default: 6006, or the "
                                                                    "next free one).")] = None,
    open_browser: Annotated[bool, typer.Option("--open", help="Open the URL in a browser, where there is one.")] = False,
    interval: Annotated[float, typer.Option(min=0.5, max=600, help="Seconds between copies of new summaries.")] = 5.0,
) -> None:
    """TensorBoard over the run's summaries: every task's own run (loss, steps/s, examples/s, PS traffic)
    and your program's `\\[training] logdir`, copied here as they are written. Works during the run and
    after it, until `stop --purge`. Ctrl-C ends it; nothing is left running here or on any host."""
    from orchestrator.results.board import Board
    from orchestrator.results.board_state import find_open
    from orchestrator.run import records
    from orchestrator.run.slurm_end import opener_for

    record = records.resolve(run)
    already = find_open(record.run_id)
    if already is not None:
        console().print(f"TensorBoard for run {escape(record.run_id)} is already open: {already.url} "
                      f"(by process {already.pid})")
        if open_browser:
            _browse(already.url)
        return

    def changed(host: str, problem: str | None) -> None:
        console(stderr=True).print(f"{escape(problem)}; TensorBoard shows what was copied" if problem else
                  f"host {escape(host)}: reachable again")

    board = Board(record, port=port, interval=interval, on_change=changed, opener=opener_for(record))
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how it ends
        try:
            board.open()
            runs = board.runs()
            console().print(f"TensorBoard for run {escape(record.run_id)}: [bold]{board.url}[/]")
            console().print(f"  runs: {escape(', '.join(runs)) if runs else 'none yet (they appear as tasks write them)'}")
            console().print(f"  copied from {escape(', '.join(board.follower.hosts) or 'no host')} every "
                          f"{interval:g} s into {escape(_home_relative(board.logdir))}; Ctrl-C to stop")
            if open_browser:
                _browse(board.url)
            while board.serving:
                time.sleep(0.5)
            if board.follower.gone:
                console(stderr=True).print(f"run {escape(record.run_id)} was purged: nothing left to show")
            else:
                console(stderr=True).print(f"TensorBoard exited: see {escape(str(board.local / 'tensorboard.log'))}")
                raise typer.Exit(exit_codes.FAILED)
        finally:
            board.close()
    console().print("TensorBoard stopped; nothing of it is left running")


def _home_relative(path: Path) -> str:
    home = Path.home()
    return f"~/{path.relative_to(home)}" if path.is_relative_to(home) else str(path)


def _browse(url: str) -> None:
    import webbrowser

    try:
        webbrowser.get().open(url)
    except webbrowser.Error:
        console(stderr=True).print("no browser here: open the URL where you have one (it listens on 127.0.0.1 only)")


def pull(
    run: Annotated[str, typer.Argument(help="Run id (see `tfcluster ls`).")],
    dest: Annotated[Path | None, typer.Argument(help="Where to put them (default: ./<run id>).")] = None,
    checkpoints: Annotated[bool, typer.Option("--checkpoints", help="The chief's checkpoint dir.")] = False,
    logs: Annotated[bool, typer.Option("--logs", help="Every task's and supervisor's log.")] = False,
    summaries: Annotated[bool, typer.Option("--summaries", help="Every task's TensorBoard run and your "
                                                                 "\\[training] logdir.")] = False,
) -> None:
    """Copy a run's results here (all three kinds unless some are named): streamed over the hosts' SSH,
    resumable (a file already here with the same size and sha256 is not copied again). Exit 3 when a host
    could not be reached, 1 when a file could not be copied."""
    from orchestrator.results.pull import pull as pull_run
    from orchestrator.results.sources import KINDS, sources
    from orchestrator.run import records
    from orchestrator.run.slurm_end import opener_for

    record = records.load(run)
    kinds = tuple(k for k, asked in zip(KINDS, (checkpoints, logs, summaries), strict=True) if asked) or KINDS
    target = dest if dest is not None else Path(record.run_id)
    results = pull_run(record, target, kinds, on_host=_show_host, opener=opener_for(record))
    if "checkpoints" in kinds:
        for source in sources(record, ("checkpoints",)):
            got = results.get(source.host)
            if not isinstance(got, HostError) and got is not None and source.remote in got.missing:
                console().print(f"no checkpoint on {escape(source.host)} yet ({escape(source.remote)})")
    total = sum(r.bytes for r in results.values() if not isinstance(r, HostError))
    console().print(f"{', '.join(kinds)} of {escape(record.run_id)} in {escape(str(target))}: "
                  f"{byte_size(total)} copied")
    errors = [r for r in results.values() if isinstance(r, HostError)]
    if any(e.reason in ("refused", "unreachable", "lost", "timeout") for e in errors):
        raise typer.Exit(exit_codes.UNREACHABLE)
    if errors or any(r.warnings for r in results.values() if not isinstance(r, HostError)):
        raise typer.Exit(exit_codes.FAILED)


def _show_host(host: str, result: Fetched | HostError) -> None:
    if isinstance(result, HostError):
        console(stderr=True).print(f"[red]{escape(result.one_line())}[/]")
        return
    console().print(f"{escape(host)}: {result.files} file(s) copied ({byte_size(result.bytes)}), "
                  f"{result.same} already here")
    for warning in result.warnings:
        console(stderr=True).print(f"  [yellow]{escape(warning)}[/]")

