"""`python -m training.agent --run-dir R --host NAME --interval 1` (see the package docstring)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from .core import Agent


def _watch_stdin(stop: threading.Event) -> None:
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except (OSError, ValueError):
        pass
    stop.set()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__package__}", description=(__doc__ or '').split("\n")[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--host", required=True, help="this host's name from hosts.toml")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--exit-on-stdin-eof", action="store_true",
                    help="stop when stdin closes (for callers that keep stdin open for the agent's lifetime)")
    args = ap.parse_args(argv)
    if args.interval <= 0:
        ap.error("--interval must be > 0")
    agent = Agent(args.run_dir, args.host, args.interval, sys.stdout)

    def on_signal(signum: int, frame: object) -> None:
        agent.stop.set()

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)
    if args.exit_on_stdin_eof:
        threading.Thread(target=_watch_stdin, args=(agent.stop,), daemon=True).start()
    agent.run()
    return 0


sys.exit(main())
