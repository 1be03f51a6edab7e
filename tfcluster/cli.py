"""`tfcluster` entry point: a thin Typer app. Every command lives in `tfcluster.commands.<name>`.

Project errors become one line on stderr with their exit code (2 for bad input), never a traceback.
"""

from __future__ import annotations

import importlib
import sys

import typer
from rich.console import Console
from rich.markup import escape

from orchestrator.errors import TfclusterError
from tfcluster.common import interrupt_on_hangup

# Each module registers its commands; listed here so `--help` has a stable order.
COMMAND_MODULES = ("plan", "check", "lifecycle", "dash", "demo", "bench", "export")

app = typer.Typer(
    name="tfcluster",
    help="Provision TensorFlow ps/worker clusters over SSH, train in-graph or between-graph, watch them live.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

for _name in COMMAND_MODULES:
    importlib.import_module(f"tfcluster.commands.{_name}").register(app)


def main() -> None:
    interrupt_on_hangup()
    try:
        app(standalone_mode=True)
    except TfclusterError as exc:
        err_console.print(f"[bold red]error:[/] {escape(exc.one_line())}", markup=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
