"""A resize cell's figures from its raw samples and the times of its join and leave: pure, no clock, no I/O.

Per event (a worker joins, that worker leaves), from the progress samples of the run's reference task
(`chief:0` where it reports progress: the in-graph client, the parameter-server-strategy coordinator, a
chief; else `worker:0`, the between-graph chief), over the event's span (its start until the next event,
or the end of the window):
- `stall_s`: the longest time the global step did not advance, from its last advance before the event
  to each advance after it (a sample whose global step passed the previous sample's, or the first sample
  of a new process: it stepped). Resolution: the progress interval (a run that never stalls shows about
  one interval). When the step never advanced again in the span, the time until the span's end, and
  `resumed` False;
- `steps_lost`: when the reference task's counters started over in the span (a restart), the last global
  step it reported before minus the step its new process resumed from, floor 0; that step is the first
  report's global step less its local steps (in the modes a resize restarts every step of the reference
  task is one global step: the in-graph client, a mirrored replica, the coordinator, a synchronous
  replica). Without a restart, a global step that went back: the drop. 0 when neither. The steps made
  after the last report before the restart are not seen: lost ones are undercounted by up to a progress
  interval's steps.
Per cell: the cluster's examples/s before the join, between the joined worker's first steps and the
leave, and after the run stepped again following the leave (measures.cluster_examples).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.bench.measures import CLIENT, Window, cluster_examples
from orchestrator.bench.samples import CellSamples, ProgressSample
from orchestrator.plan.names import task_name

EventKind = Literal["join", "leave"]
WORKER_0 = task_name("worker", 0)


@dataclass(frozen=True)
class ResizeMark:
    """One resize as the cell made it, on this machine's clock."""

    event: EventKind
    start: float  # the resize was asked
    end: float  # it returned: the record holds the new plan
    stepped: float | None  # every task that reports progress stepped after `end` (None: not seen)
    tasks: tuple[str, ...]  # the workers added or removed
    restarted: tuple[str, ...] = ()  # kept tasks the mode restarted (in-graph's client, a mirrored group)
    hosts: tuple[str, ...] = ()  # hosts that joined or left
    error: str | None = field(default=None)


def reference_task(samples: CellSamples) -> str | None:
    tasks = {p.task for p in samples.progress}
    for name in (CLIENT, WORKER_0):
        if name in tasks:
            return name
    return None


def _new_process(prev: ProgressSample, cur: ProgressSample) -> bool:
    return cur.local_step < prev.local_step


def stall(series: Sequence[ProgressSample], lo: float, hi: float) -> tuple[float | None, bool]:
    """(the longest time without an advance of the global step around [lo, hi], whether it advanced after lo)."""
    advances = [cur.t for prev, cur in itertools.pairwise(series)
                if cur.global_step > prev.global_step or (_new_process(prev, cur) and cur.local_step > 0)]
    before = [t for t in advances if t <= lo]
    if not before:  # no advance before the event: measure from the first sample
        first = next((p.t for p in series if p.t <= lo), None)
        if first is None:
            return None, False
        before = [first]
    points = [before[-1], *(t for t in advances if lo < t <= hi)]
    if len(points) == 1:
        return hi - points[0], False
    return max(b - a for a, b in itertools.pairwise(points)), True


def steps_lost(series: Sequence[ProgressSample], lo: float, hi: float) -> tuple[int, bool, int | None, int | None]:
    """(steps lost, whether the task restarted, the last global step before, the one resumed from) in (lo, hi]."""
    for prev, cur in itertools.pairwise(series):
        if not lo < cur.t <= hi:
            continue
        restarted = _new_process(prev, cur)
        if restarted or cur.global_step < prev.global_step:
            # A new process resumed from its first report's step less the steps it made since.
            resumed = cur.global_step - cur.local_step if restarted and cur.local_step <= cur.global_step \
                else cur.global_step
            return max(0, prev.global_step - resumed), restarted, prev.global_step, resumed
    return 0, False, None, None


def event_figures(samples: CellSamples, window: Window, mark: ResizeMark, until: float) -> dict[str, Any]:
    ref = reference_task(samples)
    series = samples.of_task(ref) if ref is not None else []
    stall_s, resumed = stall(series, mark.start, until)
    lost, restarted, before, after = steps_lost(series, mark.start, until)
    return {"event": mark.event, "tasks": list(mark.tasks), "hosts": list(mark.hosts),
            "restarted": list(mark.restarted), "at_s": mark.start - window.start, "took_s": mark.end - mark.start,
            "stepping_after_s": None if mark.stepped is None else mark.stepped - mark.start,
            "stall_s": stall_s, "resumed": resumed, "steps_lost": lost, "reference_restarted": restarted,
            "global_step_before": before, "resumed_from_step": after, "error": mark.error}


def resize_figures(samples: CellSamples, window: Window, workers: int, marks: Sequence[ResizeMark]) -> dict[str, Any]:
    """The cell's `resize` figures (CellFigures.resize): its events, and examples/s in each phase."""
    trainers = sorted({p.task for p in samples.progress if not p.coordinator})
    join = next((m for m in marks if m.event == "join"), None)
    leave = next((m for m in marks if m.event == "leave"), None)

    def rate(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None or b <= a else cluster_examples(samples.progress, trainers, Window(a, b))

    events = []
    for i, mark in enumerate(marks):
        until = marks[i + 1].start if i + 1 < len(marks) else window.end
        events.append(event_figures(samples, window, mark, until))
    return {
        "workers": workers, "joined": list(join.tasks) if join else [], "reference": reference_task(samples),
        "examples_per_s": {
            "before_join": rate(window.start, join.start if join else window.end),
            "between": rate(join.stepped if join else None, leave.start if leave else window.end),
            "after_leave": rate(leave.stepped if leave else None, window.end),
        },
        "events": events,
    }
