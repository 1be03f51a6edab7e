"""ProgressReporter: `progress` events from inside a TF process, written by a background thread.

The training loop calls `record(...)` after each step: it stores one tuple (a single attribute assignment,
atomic under the GIL: no lock, no I/O, no allocation beyond the tuple). A daemon thread wakes every
`interval` seconds and, if a step was recorded since its last event, appends one `progress` event to
events/<job>-<task>.jsonl (flushed per line). A slow disk therefore delays events, never training.

Fields (DESIGN.md): `local_step`, `global_step` (as last seen by this task), `examples` (cumulative, this
task; null when the program does not say, e.g. progress read from its log), `loss` (last step's), `interval_s` (since the previous event), `steps` (local steps in the
interval) and `ps_bytes` ({"ps-0": {"pulled": n, "pushed": m}}: accounted bytes in the interval, see
training/telemetry/accounting.py).

With `summaries` (training/telemetry/task_summaries.py), each event written is also a TensorBoard point of
this task's run, so TensorBoard's curves and the dashboard read the same numbers.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO, Any

from .accounting import scale
from .schema import KIND_PROGRESS, dumps, make_event
from .task_summaries import TaskSummaries

_Sample = tuple[int, int, int | None, float]  # local_step, global_step, examples, loss


class ProgressReporter:
    def __init__(
        self,
        path: str,
        *,
        host: str,
        job: str,
        task: int,
        interval: float = 1.0,
        ps_bytes_per_step: dict[str, dict[str, int]] | None = None,
        clock: Callable[[], float] = time.time,
        summaries: TaskSummaries | None = None,
    ) -> None:
        self.path = path
        self.summaries = summaries
        self.host = host
        self.job = job
        self.task = task
        self.interval = float(interval)
        self.ps_bytes_per_step = dict(ps_bytes_per_step or {})
        self._clock = clock
        self._latest: _Sample | None = None  # written by record(), read by the thread
        self._emitted: _Sample | None = None  # the sample of the last event
        self._last_t = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._file: IO[str] | None = None
        self._write_lock = threading.Lock()  # only between the thread and close(), never record()
        self.events_written = 0

    # -- called by the training loop -------------------------------------------------------------
    def record(self, local_step: int, global_step: int, examples: int | None, loss: float) -> None:
        self._latest = (local_step, global_step, examples, loss)

    def drop_pending(self) -> None:
        """Forget a sample recorded since the last event (its process is gone, or someone else reports)."""
        self._latest = self._emitted

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> ProgressReporter:
        if self._thread is None:
            self._open()
            self._last_t = self._clock()
            self._thread = threading.Thread(target=self._run, name=f"progress-{self.job}-{self.task}", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop the thread and write the last pending sample. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 2 * self.interval))
            self._thread = None
        self.flush()
        with self._write_lock:
            if self._file is not None:
                self._file.close()
                self._file = None
            if self.summaries is not None:
                self.summaries.close()

    def __enter__(self) -> ProgressReporter:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- the writer thread -------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            # a full or vanished disk must not kill training; the next interval retries
            with contextlib.suppress(OSError):
                self.flush()

    def flush(self) -> bool:
        """Write one event if a step was recorded since the last one. Returns whether it wrote."""
        with self._write_lock:
            sample = self._latest
            if sample is None or sample == self._emitted:
                return False
            now = self._clock()
            event = self._event(sample, now)
            if self._file is None:
                self._open()
            assert self._file is not None
            self._file.write(dumps(event) + "\n")
            self._file.flush()
            self._emitted = sample
            self._last_t = now
            self.events_written += 1
            if self.summaries is not None:
                with contextlib.suppress(OSError):  # a lost point must not write the event twice
                    self.summaries.add(event)
            return True

    def _event(self, sample: _Sample, now: float) -> dict[str, Any]:
        local_step, global_step, examples, loss = sample
        previous_step = self._emitted[0] if self._emitted is not None else 0  # a new process counts from 0
        steps = max(0, local_step - previous_step)
        return make_event(
            KIND_PROGRESS, self.host, job=self.job, task=self.task, t=now,
            local_step=local_step, global_step=global_step, examples=examples,
            loss=float(loss) if math.isfinite(loss) else None,
            interval_s=round(max(0.0, now - self._last_t), 6), steps=steps,
            ps_bytes=scale(self.ps_bytes_per_step, steps),
        )

    def _open(self) -> None:
        directory = os.path.dirname(self.path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (held open for the run)
