"""LogProgressTailer: `progress` events for a task that prints its progress instead of reporting it.

Stdlib only; meant for the per-host supervisor (training/supervisor.py), which already wakes every
0.1 s and owns the tasks' logs: `poll_tailers(tailers)` once per wake-up, `close_tailers(tailers)` at the
end. Each tailer follows logs/<job>-<task>.log (training/progress/follow.py), feeds every segment to a
LineProgress (training/progress/lines.py) and writes what it recognised to events/<job>-<task>.jsonl
through the same ProgressReporter the built-in trainer uses (training/telemetry/writer.py), at most once
per `interval`, driven by `poll()` (no thread: the supervisor stays single-threaded).

Which tasks are tailed (`log_progress_tailers`): only tasks running the user's own `command`; the
built-in programs write their own progress events. A user program that reports through
`tfcluster_report` (training/public/report.py) writes its TFCLUSTER_TASK_ID to
state/<job>-<task>.self-progress when it starts reporting; from then on the tailer writes nothing for
that attempt (checked before each write, at most once per interval), so one task never has two writers
counting steps differently.

Attempts: the supervisor appends `--- tfcluster: starting <job>-<i> (attempt N) ...` to the log before
each spawn; the tailer starts counting from zero there (a new process), dropping anything not yet written
for the old one (the supervisor has already recorded the new attempt, so a late event would be misread
as the new process's).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..run.layout import RunLayout
from ..telemetry.writer import ProgressReporter
from .follow import FileFollower
from .lines import LineProgress

ATTEMPT_NOTE = re.compile(r"^--- tfcluster: starting (?P<name>\S+) \(attempt (?P<attempt>\d+)\)")


class LogProgressTailer:
    def __init__(self, log_path: str, events_path: str, *, host: str, job: str, task: int,
                 pattern: str | None = None, builtin: bool = True, marker_path: str | None = None,
                 interval: float = 1.0, clock: Callable[[], float] = time.time, from_end: bool = True) -> None:
        self.host, self.job, self.task = host, job, task
        self.name = f"{job}-{task}"
        self.events_path = events_path
        self.marker_path = marker_path
        self.interval = interval
        self.clock = clock
        self.follower = FileFollower(log_path, from_end=from_end)
        self.lines = LineProgress(pattern, builtin)
        self.attempt_id: str | None = None  # TFCLUSTER_TASK_ID of the current attempt, once its note was seen
        self.standing_down = False  # the current attempt reports its progress itself
        self.segments = 0
        self.recognised = 0
        self._reporter = self._new_reporter()
        self._pending = False
        self._next_write = clock() + interval

    def _new_reporter(self) -> ProgressReporter:
        return ProgressReporter(self.events_path, host=self.host, job=self.job, task=self.task,
                                interval=self.interval, clock=self.clock)

    # -- the supervisor's calls ----------------------------------------------------------------------

    def poll(self, final: bool = False) -> None:
        """Read what the task printed since the last poll; write an event when one is due (or now, when
        `final`)."""
        now = self.clock()
        for segment in self.follower.read():
            self.segments += 1
            if segment.startswith("--- tfcluster: "):
                self._note(segment)
                continue
            if self.standing_down:
                continue
            sample = self.lines.feed(segment, now)
            if sample is not None:
                self.recognised += 1
                self._reporter.record(sample.local_step, sample.global_step, sample.examples,
                                      sample.loss if sample.loss is not None else float("nan"))
                self._pending = True
        if self._pending and (final or now >= self._next_write):
            self._next_write = now + self.interval
            if self._self_reporting():
                self._stand_down()
            else:
                self._reporter.flush()
                self._pending = False

    def close(self) -> None:
        """Read the rest of the log, write what is pending (unless the task reports itself), release the
        files."""
        with contextlib.suppress(OSError):
            self.poll(final=True)
        with contextlib.suppress(OSError):
            self._reporter.close()
        self.follower.close()

    # -- attempts and self-reporting tasks -----------------------------------------------------------

    def _note(self, segment: str) -> None:
        m = ATTEMPT_NOTE.match(segment)
        # `worker:1` (the supervisor's notes name tasks as users do); `worker-1` in logs of older runs
        if m is None or m.group("name") not in (self.name, f"{self.job}:{self.task}"):
            return
        self.attempt_id = f"{self.name}#{int(m.group('attempt')) - 1}"  # the supervisor's TFCLUSTER_TASK_ID
        self.standing_down = False
        self.lines.reset()
        self._pending = False
        self._reporter.drop_pending()
        self._reporter.close()
        self._reporter = self._new_reporter()

    def _self_reporting(self) -> bool:
        if self.marker_path is None:
            return False
        try:
            with open(self.marker_path, encoding="utf-8") as f:
                owner = f.read().strip()
        except OSError:
            return False
        if self.attempt_id is None:  # the tailer started after the attempt: any attempt of this task
            return owner.partition("#")[0] == self.name
        return owner == self.attempt_id

    def _stand_down(self) -> None:
        self.standing_down = True
        self._pending = False
        self._reporter.drop_pending()
        self.lines.reset()


# ---- the supervisor's side ----------------------------------------------------------------------------

def log_progress_tailers(layout: RunLayout, host: str, plan: dict[str, Any], clock: Callable[[], float] = time.time,
                         from_start: bool = True) -> list[LogProgressTailer]:
    """One tailer per task of `host` when the plan runs the user's own command, else none (the built-in
    programs write their own progress events). The logs are read from their start (they belong to this
    run), so the supervisor can create the tailers after it has spawned the tasks and signalled `ready`:
    importing this module (~15 ms, mostly ProgressReporter's imports) then stays off `start`'s path.
    `plan` is run.json's "plan"; its training table may carry `progress_pattern` (validated by the
    orchestrator: training/progress/lines.py pattern_error), `progress_builtin` (default true) and
    `progress_interval` (default 1 s)."""
    if plan.get("uses_user_command") is not True:
        return []
    training = plan.get("training") or {}
    pattern = training.get("progress_pattern") or None
    builtin = training.get("progress_builtin", True) is not False
    interval = float(training.get("progress_interval") or 1.0)
    return [
        LogProgressTailer(
            layout.log_file(t["job"], int(t["index"])), layout.events_file(t["job"], int(t["index"])),
            host=host, job=t["job"], task=int(t["index"]), pattern=pattern, builtin=builtin,
            marker_path=layout.self_progress_file(t["job"], int(t["index"])), interval=interval, clock=clock,
            from_end=not from_start,
        )
        for t in plan.get("tasks", [])
        if t.get("host") == host
    ]


def poll_tailers(tailers: Iterable[LogProgressTailer]) -> None:
    """One poll of every tailer; a tailer's I/O error waits for the next poll (it must not stop the
    supervisor)."""
    for tailer in tailers:
        with contextlib.suppress(OSError):
            tailer.poll()


def close_tailers(tailers: Iterable[LogProgressTailer]) -> None:
    for tailer in tailers:
        with contextlib.suppress(OSError):
            tailer.close()
