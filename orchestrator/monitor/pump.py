"""One reader thread for every host's agent stream: the StreamPump.

Each pass (twice per collector interval) takes what every registered stream holds without blocking
(`read_available`: SSHLineStream), hands the lines to the stream's consumer and reports the streams
that ended, with why. Why one thread: the dashboard applies lines once per interval anyway, and a
reader thread per host woke twice per interval each: 256 wake-ups a second at 128 hosts, whatever the
lines (benchmarks/results/dash.md compares the two). Connecting, backoff and reconnecting stay with
each host's HostStream thread, which sleeps while its stream is pumped.

A consumer never raises into the pump (the HostStream's are guarded); a stream that raises has ended.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from orchestrator.errors import TfclusterError


class PumpedStream(Protocol):
    def read_available(self) -> tuple[list[str], bool]: ...


@dataclass
class _Entry:
    stream: PumpedStream
    on_lines: Callable[[list[str]], None]
    on_end: Callable[[str | None], None]  # None: ended cleanly; else why it failed


class StreamPump(threading.Thread):
    """Reads every added stream each `period` seconds until `stop` is set; then ends each one "stopped"."""

    def __init__(self, period: float, stop: threading.Event) -> None:
        super().__init__(name="stream-pump", daemon=True)
        self.period = period
        self.stop_event = stop
        self._entries: dict[int, _Entry] = {}
        self._lock = threading.Lock()
        self._closed = False

    def add(self, stream: PumpedStream, on_lines: Callable[[list[str]], None],
            on_end: Callable[[str | None], None]) -> None:
        with self._lock:
            if not self._closed:
                self._entries[id(stream)] = _Entry(stream, on_lines, on_end)
                return
        on_end("stopped")  # added after the pump ended

    def run(self) -> None:
        while not self.stop_event.wait(self.period):
            self.pump_once()
        with self._lock:
            self._closed = True
            left, self._entries = list(self._entries.values()), {}
        for entry in left:
            entry.on_end("stopped")

    def pump_once(self) -> None:
        """One pass over every stream (the thread's loop; tests call it directly)."""
        with self._lock:
            entries = list(self._entries.items())
        for key, entry in entries:
            why: str | None = None
            try:
                lines, ended = entry.stream.read_available()
            except TfclusterError as exc:
                lines, ended, why = [], True, exc.one_line()
            except Exception as exc:  # a broken stream must never take the other hosts' down
                lines, ended, why = [], True, f"{type(exc).__name__}: {exc}"
            if lines:
                entry.on_lines(lines)
            if ended:
                with self._lock:
                    self._entries.pop(key, None)
                entry.on_end(why)
