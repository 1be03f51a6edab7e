"""Run every `benchmarks/bench_*.py` module's `main()`, one after the other, and report which failed.

    python -m benchmarks              # all of them (`make bench`)
    python -m benchmarks check dash   # only bench_check and bench_dash

Each module writes its own benchmarks/results/<name>.json and .md. A module's `main()` gets no
command-line arguments (its defaults); it may return an exit code or raise SystemExit. Before each one
the machine must be quiet (benchmarks/common.py require_quiet: the 1-minute load at most the core count,
waited for up to $TFCLUSTER_BENCH_MAX_WAIT_S seconds); otherwise it is REFUSED and counted as failed.
"""

from __future__ import annotations

import importlib
import sys
import time
import traceback
from pathlib import Path

from benchmarks import common

HERE = Path(__file__).resolve().parent


def discover() -> list[str]:
    return sorted(p.stem[len("bench_") :] for p in HERE.glob("bench_*.py"))


def run_one(name: str) -> int:
    module = importlib.import_module(f"benchmarks.bench_{name}")
    common.require_quiet(f"bench_{name}")
    saved_argv = sys.argv
    sys.argv = [f"benchmarks.bench_{name}"]  # argparse in main() sees no arguments: its defaults
    try:
        code = module.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved_argv
    return int(code or 0)


def main(argv: list[str] | None = None) -> int:
    names = discover()
    wanted = (argv if argv is not None else sys.argv[1:]) or names
    unknown = [w for w in wanted if w not in names]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(names)}", file=sys.stderr)
        return 2
    failed: list[str] = []
    for name in wanted:
        print(f"== bench_{name}", flush=True)
        started = time.monotonic()
        try:
            code = run_one(name)
        except common.MachineBusy as exc:
            print(exc, file=sys.stderr, flush=True)
            code = 75  # EX_TEMPFAIL: try again on a quieter machine
        except Exception:
            traceback.print_exc()
            code = 1
        status = "ok" if code == 0 else f"FAILED ({code})"
        print(f"== bench_{name}: {status} in {time.monotonic() - started:.1f}s", flush=True)
        if code != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
