"""A running command's output, line by line, waited for as events: a thread reads the pipe into a queue and
`expect` returns the next lines that start with a prefix (skipping others), or fails saying what it saw;
`take` returns those that came in time."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import IO


class OutputLines:
    def __init__(self, pipe: IO[str] | None) -> None:
        self._lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []  # every line read so far, in order
        threading.Thread(target=self._read, args=(pipe,), daemon=True, name="test-output").start()

    def _read(self, pipe: IO[str] | None) -> None:
        for line in pipe or []:
            self._lines.put(line.rstrip("\n"))

    def take(self, prefix: str, n: int = 1, timeout: float = 30.0) -> list[str]:
        """Up to the next `n` lines starting with `prefix`, those that came within `timeout` (other lines are
        skipped, and kept in `seen`)."""
        got: list[str] = []
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=min(0.5, max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                continue
            self.seen.append(line)
            if line.startswith(prefix):
                got.append(line)
        return got

    def expect(self, prefix: str, n: int = 1, timeout: float = 30.0,
               explain: Callable[[], str] | None = None) -> list[str]:
        """The next `n` lines starting with `prefix`, or fail saying what came instead (and `explain()`)."""
        got = self.take(prefix, n, timeout)
        detail = f"\n{explain()}" if explain is not None and len(got) < n else ""
        assert len(got) == n, f"wanted {n} line(s) starting {prefix!r} within {timeout:g}s; saw {self.seen[-20:]}{detail}"
        return got

    def so_far(self) -> list[str]:
        """Every line read until now, without waiting (for a failure's message)."""
        while True:
            try:
                self.seen.append(self._lines.get_nowait())
            except queue.Empty:
                return self.seen
