"""Stop for good: the hold file contract between the orchestrator and the supervisor. Stdlib only.

When the user stops a task for good (the dashboard's `x`), the orchestrator runs ONE command on the
task's host, `python -S -m training.supervisor.hold --run-dir R --job J --task I` (`hold_and_stop`):
it writes `state/<job>-<task>.hold` (RunLayout.hold_file; atomically, `{"held_at": <unix time>,
"reason": "stopped by the user"}`), then SIGTERMs every live process of that task, found by its
TFCLUSTER_TASK_ID marker (`<job>-<i>#<attempt>`) as `stop` and `status` find processes: never a pid
the dashboard saw earlier (it may be reused), and an attempt started a moment ago is not missed.
It prints one JSON line, `{"hold": path, "terminated": [pids]}` (decoded by
training/telemetry/state_files.py HoldReport).

The supervisor checks the file (`is_held`) whenever the task exits and before it starts the task again
after a backoff: a held task is final (never restarted), recorded as `exited` with `held: true`, and
it is not a failure (`status` does not count it; the run can still end `finished`: the supervisors'
success policy decides, training/supervisor/policy.py). A hold file is never removed: a run dir serves
one run.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import TYPE_CHECKING

from ..run.layout import RunLayout
from .files import write_json_atomic
from .procfs import run_processes, signal_pids

if TYPE_CHECKING:
    from typing import Any

HOLD_REASON = "stopped by the user"


def is_held(layout: RunLayout, job: str, index: int) -> bool:
    return os.path.exists(layout.hold_file(job, index))


def task_pids(run_dir: str, job: str, index: int) -> list[int]:
    """Every live process of any attempt of this task."""
    prefix = f"{job}-{index}#"
    return sorted(p["pid"] for p in run_processes(run_dir)
                  if p["task"].startswith(prefix) and p["task"][len(prefix):].isdigit())


def hold_and_stop(run_dir: str, job: str, index: int) -> dict[str, Any]:
    """The hold file first (when the task exits, its supervisor already finds it), then SIGTERM."""
    layout = RunLayout(run_dir)
    path = layout.hold_file(job, index)
    write_json_atomic(path, {"held_at": round(time.time(), 3), "reason": HOLD_REASON})
    pids = task_pids(run_dir, job, index)
    signal_pids(pids, signal.SIGTERM)
    return {"hold": path, "terminated": pids}


def main(argv: list[str] | None = None) -> int:
    import argparse  # here, not at the top: the supervisor imports this module at every start

    parser = argparse.ArgumentParser(prog=f"python -m {__package__}.hold")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--task", type=int, required=True)
    args = parser.parse_args(argv)
    run_dir = os.path.abspath(args.run_dir)
    if not os.path.isdir(RunLayout(run_dir).state):
        print(f"no run dir at {run_dir}", file=sys.stderr)
        return 2
    print(json.dumps(hold_and_stop(run_dir, args.job, args.task)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
