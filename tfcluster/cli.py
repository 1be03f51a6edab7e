"""`tfcluster` entry point: a thin Typer app. Every command lives in `tfcluster.commands.<name>`.

Project errors become one line on stderr with their exit code (2 for bad input), never a traceback.
Start-up is paid by every command (scripts call `status` in loops): the command modules import what
they use when they run, and the help is click's plain text (Typer's Rich help imports rich.markdown),
so `--help`, `ls` and `plan` import no Paramiko, Rich table machinery, Textual, matplotlib or
TensorFlow they do not use (tests/unit/test_cli_import_cost.py).
"""

from __future__ import annotations

import importlib
import sys

import typer

from orchestrator.errors import TfclusterError
from tfcluster.common import console, interrupt_on_hangup

# Each module registers its commands; listed here so `--help` has a stable order.
COMMAND_MODULES = ("plan", "check", "lifecycle", "resize", "dash", "results", "demo", "bench", "export")

app = typer.Typer(
    name="tfcluster",
    help="Provision TensorFlow ps/worker clusters over SSH, train in-graph or between-graph, watch them live.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

for _name in COMMAND_MODULES:
    importlib.import_module(f"tfcluster.commands.{_name}").register(app)


def main() -> None:
    interrupt_on_hangup()
    try:
        # Not Click's standalone mode: it turns a Ctrl-C anywhere into "Aborted!" and exit 1.
        code = app(standalone_mode=False)
    except TfclusterError as exc:
        from rich.markup import escape

        console(stderr=True).print(f"[bold red]error:[/] {escape(exc.one_line())}", markup=True, soft_wrap=True)
        sys.exit(exc.exit_code)
    except (KeyboardInterrupt, typer.Abort) as exc:
        signal_name = f" ({exc})" if isinstance(exc, KeyboardInterrupt) and str(exc) else ""  # SIGTERM, SIGHUP
        console(stderr=True).print(f"interrupted{signal_name}")
        sys.exit(130)
    except Exception as exc:
        # Usage errors (Click's own exceptions, vendored by newer Typer): its message, its exit code (2).
        exit_code, show = getattr(exc, "exit_code", None), getattr(exc, "show", None)
        if not isinstance(exit_code, int) or show is None:
            raise
        show()
        sys.exit(exit_code)
    sys.exit(code if isinstance(code, int) else 0)
