"""`report()`: progress events from any Python program tfcluster runs. Stdlib only (TF only in report_tf).

User programs import it as `tfcluster_report` (training/public/tfcluster_report.py, on the tasks'
PYTHONPATH); the contract:

- `report(step=None, loss=None, examples=None, global_step=None)` after a training step. `step` is this
  process's cumulative step count (default: one more than the previous call's), `examples` the examples
  processed since the previous call (e.g. the batch size; summed), `global_step` the cluster's step as
  this process last saw it (default: `step`), `loss` the last loss. Any number type float()/int() takes
  (Python, NumPy, eager tensors).
- It costs a lock and a tuple (about a microsecond): a daemon thread (ProgressReporter,
  training/telemetry/writer.py) appends at most one `progress` event per `[training] progress_interval`
  (default 1 s) to events/<job>-<task>.jsonl, and the last one at exit (atexit) or on `close()`.
- Where it writes comes from the environment the supervisor gives every task: TFCLUSTER_RUN_DIR,
  TFCLUSTER_JOB, TFCLUSTER_TASK, TFCLUSTER_HOST, TFCLUSTER_TASK_ID. Without them (the program run by
  hand) it warns once and does nothing.
- On its first call it writes TFCLUSTER_TASK_ID to state/<job>-<task>.self-progress, so the supervisor
  stops reading progress from this task's log (training/progress/tailer.py): one writer per task.
- Thread-safe. One reporting process per task: in a child forked after the first call it does nothing.
- It never raises into the training loop: a value it cannot use is ignored with one warning.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import warnings
from typing import Any

from ..run.layout import RUN_DIR_ENV, RunLayout
from ..telemetry.writer import ProgressReporter

TASK_ID_ENV = "TFCLUSTER_TASK_ID"  # as training/supervisor.py sets it (not imported: keep this module light)


class _Session:
    """The reporting state of this process: counters and the writer thread."""

    __slots__ = ("examples", "local", "lock", "loss", "pid", "reporter")

    def __init__(self, reporter: ProgressReporter) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.reporter = reporter
        self.local = 0
        self.examples: int | None = None
        self.loss = float("nan")

    def record(self, step: Any, loss: Any, examples: Any, global_step: Any) -> None:
        with self.lock:
            self.local = int(step) if step is not None else self.local + 1
            if examples is not None:
                self.examples = (self.examples or 0) + int(examples)
            if loss is not None:
                self.loss = float(loss)
            gstep = int(global_step) if global_step is not None else self.local
            self.reporter.record(self.local, gstep, self.examples, self.loss)


_start_lock = threading.Lock()
_session: _Session | None = None
_off = False  # not under tfcluster (warned once)
_bad_value_warned = False


def report(step: Any = None, loss: Any = None, examples: Any = None, global_step: Any = None) -> None:
    """Record one training step's progress (see the module docstring)."""
    session = _session
    if session is None:
        if _off:
            return
        session = _start()
        if session is None:
            return
    if session.pid != os.getpid():
        return  # a forked child: its parent reports
    try:
        session.record(step, loss, examples, global_step)
    except (TypeError, ValueError, OverflowError) as exc:
        _warn_bad_value(exc)


def current_step() -> int:
    """This process's step count so far (0 before the first report)."""
    session = _session
    return session.local if session is not None else 0


def close() -> None:
    """Write the last recorded step now and stop the writer thread (also done at exit)."""
    session = _session
    if session is not None and session.pid == os.getpid():
        session.reporter.close()


def _warn_bad_value(exc: BaseException) -> None:
    global _bad_value_warned  # noqa: PLW0603 - one warning per process, for a module-level API
    if not _bad_value_warned:
        _bad_value_warned = True
        warnings.warn(f"tfcluster_report.report(): ignoring a value it cannot use ({exc})", RuntimeWarning,
                      stacklevel=3)


def _interval(layout: RunLayout) -> float:
    """The run's `[training] progress_interval`, as the built-in trainer uses it; 1 s when unset."""
    try:
        with open(layout.run_file, encoding="utf-8") as f:
            value = (json.load(f).get("plan", {}).get("training") or {}).get("progress_interval")
        return float(value) if value else 1.0
    except (OSError, ValueError, TypeError, AttributeError):
        return 1.0


def _start() -> _Session | None:
    global _session, _off  # noqa: PLW0603 - the API is module functions over one per-process session
    with _start_lock:
        if _session is not None or _off:
            return _session
        env = os.environ
        missing = [k for k in (RUN_DIR_ENV, "TFCLUSTER_JOB", "TFCLUSTER_TASK") if not env.get(k)]
        try:
            task = int(env.get("TFCLUSTER_TASK", ""))
        except ValueError:
            missing.append("TFCLUSTER_TASK (an integer)")
        if missing:
            _off = True
            warnings.warn(f"tfcluster_report: not running under tfcluster ({', '.join(missing)} not set); "
                          "report() does nothing", RuntimeWarning, stacklevel=3)
            return None
        layout = RunLayout(env[RUN_DIR_ENV])
        job = env["TFCLUSTER_JOB"]
        reporter = ProgressReporter(layout.events_file(job, task), host=env.get("TFCLUSTER_HOST", ""), job=job,
                                    task=task, interval=_interval(layout))
        _claim(layout, job, task, env.get(TASK_ID_ENV) or f"{job}-{task}#?")
        try:
            reporter.start()
        except OSError as exc:  # no events dir: reporting is lost, training must go on
            _off = True
            warnings.warn(f"tfcluster_report: cannot write {reporter.path} ({exc}); report() does nothing",
                          RuntimeWarning, stacklevel=3)
            return None
        _session = _Session(reporter)
        atexit.register(close)
        return _session


def _claim(layout: RunLayout, job: str, task: int, task_id: str) -> None:
    """Tell the supervisor's log tailer this attempt reports its progress itself (atomic write)."""
    path = layout.self_progress_file(job, task)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        os.makedirs(layout.state, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(task_id + "\n")
        os.replace(tmp, path)
    except OSError:
        pass  # then the tailer may read this task's log too: rare (state/ is the supervisor's own dir)
