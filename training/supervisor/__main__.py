"""`python -m training.supervisor`: the supervisor's command line (see the package docstring)."""

from __future__ import annotations

import argparse
import os
import sys

from ..run.layout import RUN_DIR_ENV
from .core import Supervisor
from .detach import detach
from .handover import hand_over, serve_step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--detach", action="store_true")
    parser.add_argument("--hand-over", action="store_true", help="as --detach, to the job step of a Slurm run")
    parser.add_argument("--go", action="store_true", help="with --hand-over: on the batch node, start the step")
    parser.add_argument("--forwarded", default="", help="with --hand-over: the forwarded variables' names")
    parser.add_argument("--step", action="store_true", help="supervise as the job step of a Slurm run")
    parser.add_argument("--ready-timeout", type=float, default=20.0)
    args = parser.parse_args(argv)
    run_dir = os.path.abspath(args.run_dir)
    if os.environ.get(RUN_DIR_ENV) != run_dir:
        # The marker must be in our own /proc/<pid>/environ (set at exec time), so `stop` finds us too.
        # `start` sets it in the launching shell, which saves this second interpreter start.
        env = {**os.environ, RUN_DIR_ENV: run_dir}
        flags = ["-S"] if sys.flags.no_site else []
        again = list(sys.argv[1:] if argv is None else argv)
        os.execve(sys.executable, [sys.executable, *flags, "-m", str(__package__), *again], env)
    if args.detach:
        return detach(run_dir, args.host, args.ready_timeout)
    if args.hand_over:
        forwarded = [name for name in args.forwarded.split(",") if name]
        return hand_over(run_dir, args.host, go=args.go, forwarded=forwarded, timeout=args.ready_timeout)
    if args.step:
        return serve_step(run_dir, args.host)
    return Supervisor(run_dir, args.host).serve()


sys.exit(main())
