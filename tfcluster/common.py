"""What several commands share: the hosts.toml and run-id arguments, loading hosts.toml into a plan,
and output wide enough for their tables when it goes to a pipe."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from orchestrator.config.load import load_config, plan_config
from orchestrator.config.schema import Config
from orchestrator.plan.build import ClusterPlan

HostsFile = Annotated[Path, typer.Argument(help="The cluster description (see hosts.example.toml).")]
LatestRunId = Annotated[str | None, typer.Argument(help="Run id (default: the latest run).")]


def load_plan(hosts_file: Path) -> tuple[Config, ClusterPlan]:
    """hosts.toml, validated (ConfigError: one line, exit 2), and the plan built from it, with
    ~/.ssh/config aliases resolved to the HostName the TF tasks dial."""
    config = load_config(hosts_file)
    return config, plan_config(config, str(hosts_file))


def widen(console: Console, min_width: int) -> Console:
    """A pipe or a test gets 80 columns by default, too narrow for the tables; a terminal keeps its width."""
    if not console.is_terminal:
        console.width = max(console.width, min_width)
    return console


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def interrupt_on_hangup() -> None:
    """A closed terminal (SIGHUP) or a plain `kill` (SIGTERM) takes the Ctrl-C path: `start` rolls back,
    the demo stops its cluster, followers stop following. Textual's loop resets these on exit, so
    callers that run an app re-install them afterwards."""
    for sig in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, _interrupt)
