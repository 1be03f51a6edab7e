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
COMMAND_MODULES = ("plan", "check", "lifecycle", "dash", "results", "demo", "bench", "export")

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
        # Not Click's standalone mode: it turns a Ctrl-C anywhere into "Aborted!" and exit 1.
        code = app(standalone_mode=False)
    except TfclusterError as exc:
        err_console.print(f"[bold red]error:[/] {escape(exc.one_line())}", markup=True)
        sys.exit(exc.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        err_console.print("interrupted")
        sys.exit(130)
    except Exception as exc:
        # Usage errors (Click's own exceptions, vendored by newer Typer): its message, its exit code (2).
        exit_code, show = getattr(exc, "exit_code", None), getattr(exc, "show", None)
        if not isinstance(exit_code, int) or show is None:
            raise
        show()
        sys.exit(exit_code)
    sys.exit(code if isinstance(code, int) else 0)
