"""What the fault tests measure, read independently of the code under test, and where they record it.

- The global-step timeline is read from the trainers' own progress events (`events/<job>-<task>.jsonl`
  in each host's run dir: the loopback machines share this filesystem), not from `status`.
- `steps_lost(points, t)`: the highest global step any trainer reported up to the fault at `t`, minus
  the lowest one reported after it (0 when training never went back). Two trainers reading one shared
  counter report it a few steps apart in time, so a worker or chief fault may show `JITTER` steps.
- `checkpoint_step(directory)`: the global step of the newest checkpoint there, TF1 (`global_step`) or
  TF2 (a `step` object) alike, read by TensorFlow.
- `record(...)`: one JSON line per fault appended to the file named by $TFCLUSTER_FAULTS_RESULTS (when
  set; benchmarks/bench_faults.py sets it and turns the lines into benchmarks/results/faults.md).
  `measuring(fault, run)` writes the line whether the test passed or failed, with the first line of
  the failure.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.fault_table import CHIEF_KILL, CHIEF_TERM, PS_KILL, WORKER_KILL

__all__ = ["CHIEF_KILL", "CHIEF_TERM", "PS_KILL", "WORKER_KILL"]  # the table's columns, for the fault tests
RESULTS_ENV = "TFCLUSTER_FAULTS_RESULTS"
# Steps two asynchronous trainers may report out of order (each writes its event a moment after its step).
JITTER = 10


@dataclass(frozen=True)
class Point:
    """One progress event of one trainer process."""

    t: float
    task: str  # "worker:1"
    global_step: int
    local_step: int


def progress_points(run_dirs: list[str]) -> list[Point]:
    """Every trainer's progress events in these run dirs, oldest first (malformed lines skipped)."""
    points = []
    for run_dir in run_dirs:
        for path in sorted(Path(run_dir, "events").glob("*.jsonl")):
            for line in path.read_text(errors="replace").splitlines():
                try:
                    e = json.loads(line)
                except ValueError:
                    continue  # a line being written right now
                if not isinstance(e, dict) or e.get("kind") != "progress" or e.get("job") not in ("worker", "chief"):
                    continue
                if isinstance(e.get("global_step"), int) and isinstance(e.get("t"), (int, float)):
                    points.append(Point(float(e["t"]), f"{e['job']}:{e['task']}", e["global_step"],
                                        int(e.get("local_step") or 0)))
    return sorted(points, key=lambda p: p.t)


def step_before(points: list[Point], t: float) -> int:
    return max((p.global_step for p in points if p.t <= t), default=0)


def lowest_after(points: list[Point], t: float) -> int | None:
    return min((p.global_step for p in points if p.t > t), default=None)


def steps_lost(points: list[Point], t: float) -> int:
    low = lowest_after(points, t)
    return 0 if low is None else max(0, step_before(points, t) - low)


def first_step_after(points: list[Point], t: float, task: str | None = None, above_local: int = 0) -> Point | None:
    """The first event after `t` (of `task`, or of any trainer) of a process that had stepped past
    `above_local` local steps: a restarted process counts from 0, a resumed one from where it stopped."""
    return next((p for p in points if p.t > t and (task is None or p.task == task) and p.local_step > above_local),
                None)


def first_move_after(points: list[Point], t: float, task: str) -> Point | None:
    """The first event of `task` after `t` that shows a step taken since its last event up to `t`, whether
    by the same process (its local step grew) or by a new one (its local step started again)."""
    last = next((p.local_step for p in reversed(points) if p.task == task and p.t <= t), None)
    return next((p for p in points if p.t > t and p.task == task and p.local_step > 0 and p.local_step != last), None)


def drops(points: list[Point], jitter: int = JITTER) -> list[tuple[float, str, int, int]]:
    """Where a trainer saw the global step go back (its own reports, across its restarts, compared: a
    report written late by a process that was stopped is old, not a rollback): (time, task, highest it
    saw before, value reported)."""
    out = []
    high: dict[str, int] = {}
    for p in points:
        seen = high.get(p.task, 0)
        if p.global_step < seen - jitter:
            out.append((p.t, p.task, seen, p.global_step))
        high[p.task] = max(seen, p.global_step)
    return out


def checkpoint_step(directory: str) -> int | None:
    """The global step in the newest checkpoint of `directory` (None: none yet)."""
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(directory)
    if latest is None:
        return None
    reader = tf.train.load_checkpoint(latest)
    names = reader.get_variable_to_shape_map()
    key = "global_step" if "global_step" in names else next(n for n in names if n.startswith("step/"))
    return int(reader.get_tensor(key))


def record(**fields: Any) -> None:
    path = os.environ.get(RESULTS_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"t": round(time.time(), 3), **fields}, default=str) + "\n")


@contextmanager
def measuring(fault: str, run: str, **tags: Any) -> Iterator[dict[str, Any]]:
    """Yield a dict the test fills with its figures; its JSON line is written on the way out, with
    result "pass", or "FAIL: <first line>" when the block raised. `tags` (the run's `mode`, the fault's
    `column` in the mode x fault table of benchmarks/bench_faults.py) go into the line as they are."""
    figures: dict[str, Any] = {}
    started = time.monotonic()
    try:
        yield figures
    except BaseException as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        record(fault=fault, run=run, result=f"FAIL: {first}", test_s=round(time.monotonic() - started, 1), **tags,
               **figures)
        raise
    record(fault=fault, run=run, result="pass", test_s=round(time.monotonic() - started, 1), **tags, **figures)
