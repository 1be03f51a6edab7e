"""A settable clock for code that takes its clock as a parameter."""

from __future__ import annotations


class FakeClock:
    """A settable clock so interval_s is exact (the thread's own pacing still uses real time)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
