"""What the dashboard's views are told: `StateUpdated`, posted by the app to every view once per poll.

The app owns the poll (one thread: the UI's) and the settings the user changes (refresh interval,
pause, the row filter, the graphs and their window); each view (header, graphs, task table, PS panel,
event log, the task screen) updates itself from the message in its own turn of the event loop. A
message carries the state, those settings, whether the terminal is wide, and the poll's `FrameCost`,
which sums the poll and every view's update into the frame time (what benchmarks/bench_dash.py reports).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from textual.message import Message

from orchestrator.monitor.reducer import ClusterState

WIDE_TERMINAL = 120  # columns from which every view uses its wide layout


@dataclass(frozen=True)
class Settings:
    """The user's choices the views show or apply (the header names all of them)."""

    interval: float = 1.0
    paused: bool = False
    readonly: bool = False
    filter_text: str = ""
    tensorboard_url: str = ""  # the run's TensorBoard, once the user opened it (key `t`)
    graphs: bool | None = None  # the graphs band (key `g`); None: shown when the terminal has the rows
    graph_window: float | None = 60.0  # seconds the graphs show (key `w`); None: the whole run


class FrameCost:
    """The UI thread's work for one poll: the poll, plus each view's update, summed. Views update in
    their own turns of the event loop, so the wall time from the poll to the last view would also count
    whatever Textual renders in between; the sum is the work the poll caused."""

    def __init__(self, poll_s: float, views: int, record: Callable[[float], None]) -> None:
        self.seconds = poll_s
        self.pending = views
        self._record = record

    @contextmanager
    def measure(self) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - t0
            self.pending -= 1
            if self.pending == 0:
                self._record(self.seconds)


class StateUpdated(Message, bubble=False):
    """A new ClusterState (or new settings over the same one; then `frame` is None)."""

    def __init__(self, state: ClusterState, settings: Settings, *, wide: bool, frame: FrameCost | None = None) -> None:
        super().__init__()
        self.state = state
        self.settings = settings
        self.wide = wide
        self.frame = frame

    @contextmanager
    def measured(self) -> Iterator[None]:
        """Wrap a view's update: its time counts into the poll's frame."""
        if self.frame is None:
            yield
        else:
            with self.frame.measure():
                yield
