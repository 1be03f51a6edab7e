"""What several commands share: the hosts.toml and run-id arguments, loading hosts.toml into a plan, the
consoles, and output wide enough for their tables when it goes to a pipe. Light to import: Rich and the
plan's schema (pydantic) are imported by the functions that use them."""

from __future__ import annotations

import signal
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.config.modes import Mode

if TYPE_CHECKING:
    from rich.console import Console

    from orchestrator.plan.model import ClusterPlan

HostsFile = Annotated[Path, typer.Argument(help="The cluster description (see hosts.example.toml).")]
LatestRunId = Annotated[str | None, typer.Argument(help="Run id (default: the latest run).")]


def load_plan(hosts_file: Path, mode: Mode | None = None) -> ClusterPlan:
    """The plan of hosts.toml (ConfigError: one line with the file's line, exit 2), with ~/.ssh/config
    aliases resolved to the HostName the TF tasks dial (orchestrator.plan.from_file)."""
    from orchestrator.plan.from_file import plan_file

    return plan_file(hosts_file, mode)


@cache
def console(stderr: bool = False) -> Console:
    """The command's console on stdout (or stderr), made once."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def widen(console: Console, min_width: int) -> Console:
    """A pipe or a test gets 80 columns by default, too narrow for the tables; a terminal keeps its width."""
    if not console.is_terminal:
        console.width = max(console.width, min_width)
    return console


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)  # named, so that "interrupted (SIGTERM)" says who asked


def interrupt_on_hangup() -> None:
    """A closed terminal (SIGHUP) or a plain `kill` (SIGTERM) takes the Ctrl-C path: `start` rolls back,
    the demo stops its cluster, followers stop following. Textual's loop resets these on exit, so
    callers that run an app re-install them afterwards."""
    for sig in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, _interrupt)
