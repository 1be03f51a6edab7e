"""A resize cell's measured window: a worker joins the running cluster, then leaves it, through the real resize.

The cell started with its N workers (hosts.toml's first N); `at_s` into the window the next worker hosts.toml
lists joins (cells.grown_plan: on its own host when it has one), planned and diffed as `tfcluster resize`
does it (orchestrator.plan.resize_diff.plan_resize) and applied by orchestrator.run.resize.resize, the one
the CLI calls. The cell then waits, on the telemetry, until every task that reports progress in the new
plan has stepped after the resize returned (a worker that joined, a client or group the mode restarted,
the others: up to a progress interval after their step, the time it is reported);
`at_s` later the worker leaves the same way (the cell's own N-worker plan again), the cell waits until the
run steps again, and the window ends `at_s` after that. Each change is a ResizeMark (resize_figures.py
turns them and the samples into the figures). The collector follows the run's record through both
changes (orchestrator/monitor/reshape.py), so the joined worker's host is watched from its join on.

A run the resize refuses (resizable.resize_refusal: its mode, a Slurm job) is refused right after its
start, one line, and the cell is recorded failed with it. A change whose run does not step again within
STEP_WAIT_S fails the cell; the marks made so far are kept for its figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from orchestrator.bench.cells import Cell, cell_plan, grown_plan
from orchestrator.bench.resize_figures import EventKind, ResizeMark
from orchestrator.bench.samples import RecordingState
from orchestrator.bench.spec import BenchSpec
from orchestrator.config.load import read_config
from orchestrator.errors import TfclusterError
from orchestrator.plan.model import ClusterPlan
from orchestrator.plan.resize_diff import plan_resize
from orchestrator.run.records import RunRecord
from orchestrator.run.resizable import resize_refusal
from orchestrator.run.resize import ResizeOptions, resize
from training.run.roles import reports_progress

RESIZE_TIMEOUT_S = 180.0  # one resize: a new host shipped and launched, or a group restarted, on a loaded machine
STEP_WAIT_S = 180.0  # after a resize, until every trainer of the new plan steps (TensorFlow's start-up)

PollFn = Callable[[Collection[str]], None]  # one poll of the collector; a failed task (but these) fails the cell
PhaseFn = Callable[[str, float, float], None]


class ResizeNotDone(TfclusterError):
    """The resize cell's run was refused a resize, or did not step again after one."""


def refusal(record: RunRecord) -> None:
    """ResizeNotDone with resize_refusal's line, when the run cannot be resized."""
    if why := resize_refusal(record):
        raise ResizeNotDone(why)


@dataclass
class ResizeRun:
    spec: BenchSpec
    cell: Cell
    record: RunRecord  # the run's; resize() keeps it as the run is
    state: RecordingState
    poll: PollFn
    phase: PhaseFn
    marks: list[ResizeMark] = field(default_factory=list)

    def measure(self, start: float) -> None:
        """The window from `start`: hold, join, hold, leave, hold (see the module's doc)."""
        assert self.spec.resize is not None
        at = self.spec.resize.at_s
        config, _ = read_config(self.spec.hosts_file)
        self._hold(start, start + at)
        join = self._change("join", grown_plan(self.spec, config, self.cell))
        self._hold(start, join + at)
        leave = self._change("leave", cell_plan(self.spec, config, self.cell))
        self._hold(start, leave + at)

    def _hold(self, start: float, until: float) -> None:
        while time.time() < until:
            self.phase("measure", min(time.time() - start, self.spec.seconds), self.spec.seconds)
            self.poll(())

    def _change(self, event: EventKind, plan: ClusterPlan) -> float:
        """One resize to `plan`, marked; the time every trainer stepped after it (ResizeNotDone if none)."""
        change = plan_resize(self.record.plan, plan)
        tasks = change.added if event == "join" else change.removed
        hosts = change.hosts_added if event == "join" else change.hosts_removed
        self.phase(f"{event}: {', '.join(tasks)}", 0, 1)
        t0 = time.time()
        try:
            result = resize(self.record, change, self.spec.hosts_file, ResizeOptions(timeout=RESIZE_TIMEOUT_S))
        except TfclusterError as exc:
            if getattr(getattr(exc, "error", exc), "reason", None) == "cancelled":
                raise KeyboardInterrupt from None  # Ctrl-C, which the resize undid: the bench ends, not the cell
            self.marks.append(ResizeMark(event, t0, time.time(), None, tasks, (), hosts, exc.one_line()))
            raise ResizeNotDone(f"{event} of {', '.join(tasks)}: {exc.one_line()}") from None
        t1 = time.time()
        restarted = tuple(result.restarted)
        skip = {*restarted, *(tasks if event == "leave" else ())}  # (their processes end; not failures)
        stepped = self._await_steps(plan, t1, skip, event)
        self.marks.append(ResizeMark(event, t0, t1, stepped, tasks, restarted, hosts))
        if stepped is None:
            raise ResizeNotDone(f"after the {event} of {', '.join(tasks)} the run did not step again within "
                                f"{STEP_WAIT_S:g} s")
        return stepped

    def _await_steps(self, plan: ClusterPlan, since: float, skip: set[str], event: EventKind) -> float | None:
        """When every task of `plan` that reports progress had stepped after the resize returned (`since`):
        a worker that joined, a client or group the mode restarted (their new processes), the others."""
        names = [t.name for t in plan.tasks if reports_progress(plan.mode, t.job)]
        until = time.time() + STEP_WAIT_S
        while time.time() < until:
            self.phase(f"{event}: first steps", 0, 1)
            self.poll(skip)
            seen = [self._progress_since(n, since) for n in names]
            if all(t is not None for t in seen):
                return max(t for t in seen if t is not None)
        return None

    def _progress_since(self, name: str, since: float) -> float | None:
        tv = self.state.tasks.get(name)
        at = tv.progress_at if tv is not None else None
        return at if at is not None and at > since else None
