"""`RunHistory`: the run's time series for the dashboard's graphs, bounded however long the run.

Fed by the reducer from the events it already folds (progress, host samples), in the same local time:
- the cluster's examples/s, per task steps/s (the first MAX_TASK_LINES tasks that report)
  and per host steps/s, the loss, the PS traffic measured by the kernel (in, out) and accounted by the
  workers (in*, out*);
- per host CPU, memory and GPU utilisation (the agent's live samples: not in the events files).

A rate's amount (steps, examples, bytes between two reports) is spread over the time it covers, so a
report arriving a little early or late does not make a spike and a hole. A level (loss, CPU %) keeps
its sum and count. Every `Series` has a fixed number of buckets: when a run outgrows them, adjacent
buckets merge (the resolution halves), so the whole run stays in memory at bounded cost (CAPACITY
buckets per series: 1 s wide for the first 34 minutes, 2 s for the next 34, and so on).
Readers resample a series into the buckets they draw (`Series.rates`, `Series.levels`).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field

from orchestrator.monitor.events import GpuSample, ProgressEvent, PsTcp

BASE_WIDTH_S = 1.0
CAPACITY = 2048  # buckets per cluster series
HOST_CAPACITY = 1024  # per host series (128 hosts x 4 series stay a few MB)
MAX_TASK_LINES = 8  # per task series are kept for this many tasks (the graph draws a line each)


class Series:
    """Sums (and, for a level, counts) in equal time buckets from `start`; halves its resolution when full."""

    __slots__ = ("capacity", "counts", "start", "sums", "width")

    def __init__(self, capacity: int = CAPACITY, width: float = BASE_WIDTH_S) -> None:
        self.capacity = capacity
        self.width = width
        self.start: float | None = None
        self.sums = array("d")
        self.counts = array("d")

    def __len__(self) -> int:
        return len(self.sums)

    @property
    def end(self) -> float | None:
        return None if self.start is None else self.start + len(self.sums) * self.width

    def _index(self, t: float) -> int:
        """The bucket of `t`, made room for (earlier than the start: the series grows to the left)."""
        if self.start is None:
            self.start = math.floor(t / self.width) * self.width
        if t < self.start:
            missing = math.ceil((self.start - t) / self.width)
            while len(self.sums) + missing > self.capacity:  # (halving halves `missing` too: it ends)
                self._halve()
                missing = math.ceil((self.start - t) / self.width)
            zeros = array("d", bytes(8 * missing))
            self.sums, self.counts = zeros + self.sums, zeros + self.counts
            self.start -= missing * self.width
        i = int((t - self.start) // self.width)
        while i >= self.capacity:
            self._halve()
            i = int((t - self.start) // self.width)
        if i >= len(self.sums):
            grow = array("d", bytes(8 * (i + 1 - len(self.sums))))
            self.sums.extend(grow)
            self.counts.extend(grow)
        return i

    def _halve(self) -> None:
        n = len(self.sums)
        self.sums = array("d", (sum(self.sums[i:i + 2]) for i in range(0, n, 2)))
        self.counts = array("d", (sum(self.counts[i:i + 2]) for i in range(0, n, 2)))
        self.width *= 2

    def add(self, t: float, value: float) -> None:
        """One sample of a level (loss, CPU %) at `t`."""
        if not math.isfinite(t + value):
            return  # a line's nonsense must not break the graphs (an infinite time has no bucket)
        i = self._index(t)
        self.sums[i] += value
        self.counts[i] += 1

    def spread(self, t0: float, t1: float, amount: float) -> None:
        """An amount (steps, bytes) made between t0 and t1, spread over the buckets that time covers.
        (Per progress event, a few times: the common case, buckets that exist already, is kept short.)"""
        if not math.isfinite(t1 - t0 + amount):
            return
        if t1 <= t0:
            self.add(t1, amount)
            return
        start, w = self.start, self.width
        if start is None or t0 < start or t1 >= start + len(self.sums) * w:
            self._index(t1)
            if self.start is not None and t0 < self.start:
                self._index(t0)  # grows to the left, or coarsens
            start, w = self.start, self.width
            assert start is not None
        i0, i1 = int((t0 - start) // w), int((t1 - start) // w)
        sums = self.sums
        self.counts[i1] += 1
        if i0 == i1:
            sums[i1] += amount
            return
        per_s = amount / (t1 - t0)
        sums[i0] += per_s * (start + (i0 + 1) * w - t0)
        for i in range(i0 + 1, i1):
            sums[i] += per_s * w
        sums[i1] += per_s * (t1 - (start + i1 * w))

    def _resample(self, start: float, end: float, n: int) -> tuple[list[float], list[float]]:
        """The sums and counts of the buckets in each of n equal slices of [start, end], a bucket shared
        between two slices by the part of it in each (one sweep over the buckets in the window)."""
        sums, counts = [0.0] * n, [0.0] * n
        first = self.start
        if first is None:
            return sums, counts
        w, dw = self.width, (end - start) / n
        lo = max(int((start - first) // w), 0)
        hi = min(math.ceil((end - first) / w), len(self.sums))
        for i in range(lo, hi):
            a = first + i * w
            b = a + w
            j0, j1 = int((a - start) // dw), int((b - start) // dw)
            if j0 == j1 or (j1 == j0 + 1 and b == start + j1 * dw):
                if 0 <= j0 < n:
                    sums[j0] += self.sums[i]
                    counts[j0] += self.counts[i]
                continue
            for j in range(max(j0, 0), min(j1, n - 1) + 1):
                f = (min(b, start + (j + 1) * dw) - max(a, start + j * dw)) / w
                if f > 0:
                    sums[j] += self.sums[i] * f
                    counts[j] += self.counts[i] * f
        return sums, counts

    def rates(self, start: float, end: float, n: int) -> list[float | None]:
        """Amount per second in each of n equal slices of [start, end] (None: before the series began)."""
        sums, _ = self._resample(start, end, n)
        dw = (end - start) / n
        first = self.start
        return [None if first is None or start + (j + 1) * dw <= first else sums[j] / dw for j in range(n)]

    def levels(self, start: float, end: float, n: int) -> list[float | None]:
        """The mean sample in each of n equal slices of [start, end] (None: no sample there)."""
        sums, counts = self._resample(start, end, n)
        return [s / c if c > 0 else None for s, c in zip(sums, counts, strict=True)]


@dataclass
class HostSeries:
    steps: Series = field(default_factory=lambda: Series(HOST_CAPACITY))
    cpu: Series = field(default_factory=lambda: Series(HOST_CAPACITY))
    mem: Series = field(default_factory=lambda: Series(HOST_CAPACITY))
    gpu: Series = field(default_factory=lambda: Series(HOST_CAPACITY))


@dataclass
class RunHistory:
    """The run's series, keyed as the reducer knows them (task names, host names)."""

    examples: Series = field(default_factory=Series)
    loss: Series = field(default_factory=Series)
    traffic_in: Series = field(default_factory=Series)  # measured (kernel counters), summed over PS tasks
    traffic_out: Series = field(default_factory=Series)
    accounted_in: Series = field(default_factory=Series)  # accounted by the workers (pushed to the PS)
    accounted_out: Series = field(default_factory=Series)  # (pulled from the PS)
    tasks: dict[str, Series] = field(default_factory=dict)  # steps, for the first MAX_TASK_LINES tasks
    hosts: dict[str, HostSeries] = field(default_factory=dict)
    _counters: dict[str, tuple[float, int, int]] = field(default_factory=dict)  # name -> remote t, in, out
    # The workers' accounted bytes of the current second, summed: one write per second, not two per event
    # (every worker reports on every PS: many workers smooth what a spread would).
    _acc_second: float | None = None
    _acc: list[float] = field(default_factory=lambda: [0.0, 0.0])

    @property
    def first(self) -> float | None:
        """Local time of the earliest data (the start of the whole run's window)."""
        starts = [s.start for s in (self.examples, self.loss, self.traffic_in, self.accounted_in)
                  if s.start is not None]
        return min(starts) if starts else None

    def host(self, name: str) -> HostSeries:
        h = self.hosts.get(name)
        if h is None:
            h = self.hosts[name] = HostSeries()
        return h

    def progress(self, task: str, host: str, t0: float, t1: float, steps: float, examples: float | None,
                 counted: bool) -> None:
        """A task's steps (and examples) made between two reports (local times). `counted`: it adds to
        the cluster's totals (a coordinator's steps are its workers')."""
        if counted and examples is not None:
            self.examples.spread(t0, t1, examples)
        self.host(host).steps.spread(t0, t1, steps)
        series = self.tasks.get(task)
        if series is None and len(self.tasks) < MAX_TASK_LINES:
            series = self.tasks[task] = Series()
        if series is not None:
            series.spread(t0, t1, steps)

    def loss_sample(self, t: float, loss: float) -> None:
        self.loss.add(t, loss)

    def accounted(self, t: float, pushed: float, pulled: float) -> None:
        """Bytes a worker accounted in its last interval, reported at `t`."""
        second = math.floor(t) if math.isfinite(t) else None
        if second != self._acc_second:
            self.flush()
            self._acc_second = second
        acc = self._acc
        acc[0] += pushed
        acc[1] += pulled

    def flush(self) -> None:
        """Write what is summed of the current second (readers call it before they read)."""
        second, acc = self._acc_second, self._acc
        if second is not None and (acc[0] or acc[1]):
            self.accounted_in.add(second + 0.5, acc[0])
            self.accounted_out.add(second + 0.5, acc[1])
        acc[0] = acc[1] = 0.0

    def host_sample(self, host: str, t: float, remote_t: float, cpu_pct: float | None, mem_pct: float | None,
                    gpus: tuple[GpuSample, ...], tcp: dict[str, PsTcp]) -> None:
        """A host's sample: its CPU, memory, mean GPU utilisation, and its tasks' traffic counters
        (rates between two samples, as the PS panel makes them)."""
        h = self.host(host)
        if cpu_pct is not None:
            h.cpu.add(t, cpu_pct)
        if mem_pct is not None:
            h.mem.add(t, mem_pct)
        utils = [g.util_pct for g in gpus if g.util_pct is not None]
        if utils:
            h.gpu.add(t, sum(utils) / len(utils))
        for name, m in tcp.items():
            measured = m.t if m.t is not None else remote_t  # (the supervisor's measurement's own time)
            prev = self._counters.get(name)
            if prev is not None and measured <= prev[0]:
                continue  # a measurement seen already, or an older one
            self._counters[name] = (measured, m.bytes_in, m.bytes_out)
            if prev is None or m.bytes_in < prev[1] or m.bytes_out < prev[2]:
                continue  # the first sample, or counters that restarted
            t1 = t - (remote_t - measured)
            t0 = t1 - (measured - prev[0])
            self.traffic_in.spread(t0, t1, m.bytes_in - prev[1])
            self.traffic_out.spread(t0, t1, m.bytes_out - prev[2])


def record_progress(history: RunHistory, ev: ProgressEvent, task: str, t: float,
                    prev: tuple[float, int, int | None] | None) -> None:
    """What one progress report (local time `t`) adds to the history, its previous report being `prev`
    (remote t, local step, examples), as the reducer keeps it; a report seen already never comes here."""
    counted = not ev.coordinator
    if prev is not None and ev.local_step >= prev[1]:
        t0 = t - (ev.t - prev[0])
        examples = None if ev.examples is None or prev[2] is None else max(ev.examples - prev[2], 0)
        history.progress(task, ev.host, t0, t, ev.local_step - prev[1], examples, counted)
    if ev.loss is not None and counted:
        history.loss_sample(t, ev.loss)
    if ev.ps_bytes and ev.interval_s:
        pushed = pulled = 0
        for b in ev.ps_bytes.values():
            pushed += b.pushed
            pulled += b.pulled
        history.accounted(t, pushed, pulled)
