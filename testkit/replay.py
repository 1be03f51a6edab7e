"""`ReplaySource`: a StateSource that plays (arrival time, event) pairs against a clock, and `FakeClock`,
a clock tests move by hand. For the dashboard's tests and benchmark: screens rendered from a known
history, never from wall time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from orchestrator.monitor.events import Event, EventParser
from orchestrator.monitor.reducer import ClusterState
from orchestrator.plan.names import task_name


class FakeClock:
    """A clock tests move by hand, so ages and rates in a rendered screen never depend on wall time."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class ReplaySource:
    """Replays (arrival time, event) pairs: `poll` applies every event that has arrived by `clock()`."""

    def __init__(self, state: ClusterState, events: Iterable[tuple[float, Event]] = (),
                 clock: Callable[[], float] = time.time, logs: dict[str, list[str]] | None = None) -> None:
        self.state = state
        self.clock = clock
        self._pending: list[tuple[float, Event]] = sorted(events, key=lambda p: p[0])
        self._next = 0
        self.logs = logs or {}
        self.polls = 0

    def push(self, arrival: float, event: Event) -> None:
        """Add an event (arrivals must not go back in time relative to already-pushed ones)."""
        self._pending.append((arrival, event))

    def extend(self, pairs: Iterable[tuple[float, Event]]) -> None:
        for a, e in pairs:
            self.push(a, e)

    def push_lines(self, arrival: float, lines: Iterable[str], parser: EventParser | None = None) -> None:
        """Recorded agent output: JSON lines, malformed ones counted on the state."""
        p = parser or EventParser()
        before = p.malformed
        for line in lines:
            ev = p.parse(line)
            if ev is not None:
                self.push(arrival, ev)
        self.state.malformed += p.malformed - before

    def poll(self) -> ClusterState:
        now = self.clock()
        pending, i = self._pending, self._next
        while i < len(pending) and pending[i][0] <= now:
            self.state.apply(pending[i][1], pending[i][0])
            i += 1
        self._next = i
        if i > 4096:  # drop what was applied, keep memory flat in long replays
            del pending[:i]
            self._next = 0
        self.state.tick(now)
        self.polls += 1
        return self.state

    def task_log(self, job: str, task: int, lines: int = 200) -> list[str]:
        return self.logs.get(task_name(job, task), [])[-lines:]

    def close(self) -> None:
        pass
