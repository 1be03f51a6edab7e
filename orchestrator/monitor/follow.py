"""Following one run to its end (`start --wait`): when to stop following, and what to say last.

`follow` reads the run (`read_run`, orchestrator/monitor/status.py) and re-reads the local run record every turn,
so a `tfcluster stop` from another terminal ends it. `RunFollower.judge` decides from as few of
status's fields as it can (the run's state; each task's name, state, final, exit code, failed, error; the
global step), so it does not care how status judges a task. It promises:

- `finished` (exit 0 for the CLI) when the run finished, or when every task the success policy waits
  for (training/supervisor/policy.py `waited_for`) exited 0 and the rest ended or are on lost hosts:
  under `success = "chief"` a worker's host lost on the way does not keep the follower waiting;
- `failed`, naming the first failed task and its error (`worker:0: ModuleNotFoundError: ...`);
- `stopped` when the record says a `stop` ran, or the run ended stopped;
- `lost` (exit 3) when a task the run cannot finish without (policy.py `needed_for_the_run`: a ps, a
  worker of the synchronous modes; and every task the policy waits for) is lost: its host unreachable for `window_s` (the liveness window),
  or its supervisor and processes gone, or never started; and when a host is lost and nothing the run
  waits for has moved (global step, a running waited-for task, a state) for two windows.
So it never follows longer than two liveness windows after the last event it waits for. A Slurm run's
nodes are never judged lost while Slurm says their job runs or is ending: the job's end (time limit, a
node failure...) says how the run ended (orchestrator/run/slurm_end.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.errors import UsageError
from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.status import read_run
from orchestrator.monitor.task_state import TaskState
from orchestrator.run import records
from orchestrator.run.slurm_job import ENDED
from training.supervisor.policy import needed_for_the_run, waited_for

LIVENESS_WINDOW_S = 10.0  # a host unreachable this long is lost (a stopped sshd, a dead machine)
EVERY_S = 2.0
GONE_FOR_GOOD = ("lost", "not-started")  # nobody will run these again
Outcome = Literal["finished", "failed", "stopped", "lost"]


@dataclass(frozen=True)
class Seen:
    """What the follower reads of one look at the run (a ClusterState: `Seen.of`)."""

    run_state: str
    tasks: list[TaskState]
    global_step: int | None
    job_state: str | None = None  # a Slurm run's job as Slurm says it (RUNNING, COMPLETING, TIMEOUT...)

    @classmethod
    def of(cls, st: ClusterState) -> Seen:
        return cls(st.run_state, list(st.tasks.values()), st.global_step, st.slurm["state"] if st.slurm else None)


@dataclass(frozen=True)
class Ending:
    outcome: Outcome
    why: str  # one line: the follower's last word


@dataclass
class RunFollower:
    """Successive looks at one run, judged against its plan and the clock (seconds, monotonic)."""

    waited: frozenset[str]  # "job:index" names whose exit 0 finishes the run
    needed: frozenset[str]  # without these the run cannot finish (waited ones included)
    window_s: float = LIVENESS_WINDOW_S
    silent_since: dict[str, float] = field(default_factory=dict)  # task -> first seen unreachable/lost
    last_event: tuple[float, object] = (float("-inf"), None)  # (when, what moved)

    @classmethod
    def of(cls, record: records.RunRecord, window_s: float = LIVENESS_WINDOW_S) -> RunFollower:
        def labels(names: set[str]) -> frozenset[str]:
            return frozenset(name.replace("-", ":", 1) for name in names)

        waited = labels(waited_for(record.plan_json))
        return cls(waited, waited | labels(needed_for_the_run(record.plan_json)), window_s)

    def judge(self, st: Seen, record_status: str, now: float) -> Ending | None:
        """The ending, or None: keep following."""
        tasks = st.tasks
        if record_status in ("stopped", "purged"):
            return Ending("stopped", "stopped by `tfcluster stop`")
        if st.run_state == "stopped":
            if any(t.stopped_by == "stop" for t in tasks):  # `stop` ends the tasks before it saves the record
                return Ending("stopped", "stopped by `tfcluster stop`")
            return Ending("stopped", "stopped: what the run waits for was stopped for good")
        if st.run_state == "failed":
            gone = sorted(t.name for t in tasks if t.state == "lost")
            if gone:  # e.g. a Slurm node failed: what ran there is lost, and that is what the exit code says
                return Ending("lost", f"failed: {', '.join(gone)} lost ({first_failure(tasks)})")
            return Ending("failed", f"failed: {first_failure(tasks)}")
        if st.run_state == "finished":
            return Ending("finished", "finished")
        by_name = {t.name: t for t in tasks}
        if st.job_state is not None and st.job_state not in ENDED:
            return None  # Slurm says its job still runs (or is ending): its word on the nodes comes first
        lost = self._lost(tasks, now)
        waited_done = bool(self.waited) and all(
            n in by_name and by_name[n].final and by_name[n].exit_code == 0 for n in self.waited)
        fatal = sorted(n for n in lost if n in self.needed)
        if fatal and not waited_done:
            return Ending("lost", f"partial: {_named(fatal, by_name)} lost: the run cannot finish without it")
        self._note_events(st, now)
        quiet_since = self.last_event[0]
        if waited_done:
            left = [t.name for t in tasks if not t.final and t.name not in lost]
            if not left or now - quiet_since >= 2 * self.window_s:
                notes = [f"{_named(sorted(lost), by_name)} lost on the way"] if lost else []
                notes += [f"{', '.join(left)} still not ended"] if left else []
                return Ending("finished", "finished" + (f" ({'; '.join(notes)})" if notes else ""))
            return None
        if lost:
            quiet_since = max(quiet_since, min(lost.values()))
            if now - quiet_since >= 2 * self.window_s:
                return Ending("lost", f"partial: {_named(sorted(lost), by_name)} lost and nothing the run waits for "
                                      f"has moved for {2 * self.window_s:g}s")
        return None

    def _lost(self, tasks: list[TaskState], now: float) -> dict[str, float]:
        """Tasks gone for good, or unreachable for a whole liveness window: since when they count as lost."""
        lost = {}
        for t in tasks:
            if t.state not in ("unreachable", *GONE_FOR_GOOD):
                self.silent_since.pop(t.name, None)
                continue
            since = self.silent_since.setdefault(t.name, now)
            lost_at = since if t.state in GONE_FOR_GOOD else since + self.window_s
            if now >= lost_at:
                lost[t.name] = lost_at
        return lost

    def _note_events(self, st: Seen, now: float) -> None:
        tasks = st.tasks
        moving = any(t.state == "running" for t in tasks if t.name in self.waited)
        marks = (st.global_step, tuple((t.name, t.state, t.final) for t in tasks))
        if moving or marks != self.last_event[1]:
            self.last_event = (now, marks)


def first_failure(tasks: list[TaskState]) -> str:
    """`worker:0: <its error>` for the failed task that ended first."""
    failed = sorted((t for t in tasks if t.failed), key=lambda t: t.updated_at or 0.0)
    if not failed:
        return "a host's supervisor reported the run failed"
    t = failed[0]
    how = t.error or (f"exit code {t.exit_code}" if t.exit_code is not None else f"signal {t.signal}")
    return f"{t.name}: {how}"


def _named(names: list[str], by_name: dict[str, TaskState]) -> str:
    return ", ".join(f"{n} (host {by_name[n].host})" for n in names)


def follow(run_id: str, on_status: Callable[[ClusterState], None], *, every: float = EVERY_S,
           window_s: float = LIVENESS_WINDOW_S, clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep) -> Ending:
    """Read the run until it ends (RunFollower); `on_status` sees every state on the way."""
    follower: RunFollower | None = None
    while True:
        try:
            record = records.load(run_id)  # again each turn: a `stop` elsewhere saved "stopped"
        except UsageError as exc:  # removed or damaged meanwhile: nothing left to follow
            return Ending("stopped", f"stopped: the run record is gone ({exc})")
        follower = follower or RunFollower.of(record, window_s)
        st = read_run(record, timeout=window_s)
        on_status(st)
        ending = follower.judge(Seen.of(st), record.status, clock())
        if ending is not None:
            return ending
        sleep(every)
