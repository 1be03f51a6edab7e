"""What the dashboard's graphs draw: the run's history (orchestrator/monitor/history.py) resampled over
the window the user chose. Pure functions of the ClusterState, no Textual.

Four graphs: the cluster's examples/s; steps/s per worker (one line each up to MAX_LINES workers, else
per host, mean per worker; past MAX_LINES hosts the slowest, median and fastest host); the loss; the
traffic in and out of the PS tasks (measured by the kernel; `*`: accounted by the workers), or of the
workers in an all-reduce run. And per host, its CPU, memory and GPU utilisation (`host_levels`).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.monitor.history import MAX_TASK_LINES, Series
from orchestrator.monitor.reducer import ClusterState

WINDOWS: tuple[tuple[float | None, str], ...] = ((60.0, "1 min"), (600.0, "10 min"), (None, "whole run"))
MAX_LINES = MAX_TASK_LINES
MIN_SPAN_S = 60.0  # the whole run's window is never shorter (a run's first seconds)

Values = list[float | None]


@dataclass(frozen=True)
class Line:
    label: str
    values: tuple[float | None, ...]


@dataclass(frozen=True)
class Graph:
    key: str  # examples | steps | loss | traffic
    title: str
    lines: tuple[Line, ...]


@dataclass(frozen=True)
class Frame:
    """Every graph over one window: [start, end] in local time, `points` values per line."""

    start: float
    end: float
    points: int
    graphs: tuple[Graph, ...]


def window_label(window: float | None) -> str:
    return next(label for w, label in WINDOWS if w == window)


def next_window(window: float | None) -> float | None:
    i = next(i for i, (w, _) in enumerate(WINDOWS) if w == window)
    return WINDOWS[(i + 1) % len(WINDOWS)][0]


def span(st: ClusterState, window: float | None) -> tuple[float, float]:
    """The window's [start, end]: the last `window` seconds up to one report interval ago, or the whole
    run (from its first data)."""
    end = st.now - st.interval_s  # the newest slice is whole only once the next report is in
    if window is not None:
        return end - window, end
    first = st.history.first
    return (end - MIN_SPAN_S if first is None else min(first, end - MIN_SPAN_S)), end


def points(start: float, end: float, room: int) -> int:
    """How many values to draw: one per column of room, never finer than the history's 1 s buckets."""
    return max(2, min(room, int(end - start)))


def _per_worker(st: ClusterState, start: float, end: float, n: int) -> tuple[Line, ...]:
    h = st.history
    reporting = [t for t in st.tracks.values() if t.reports != "no" and not t.coordinator]
    if len(reporting) <= MAX_LINES and all(t.name in h.tasks for t in reporting):
        return tuple(Line(t.name, tuple(h.tasks[t.name].rates(start, end, n))) for t in reporting)
    workers: dict[str, int] = {}
    for t in reporting:
        workers[t.host] = workers.get(t.host, 0) + 1
    per_host = {name: [None if v is None else v / workers[name] for v in h.hosts[name].steps.rates(start, end, n)]
                for name in sorted(workers) if name in h.hosts}
    if len(per_host) <= MAX_LINES:
        return tuple(Line(name, tuple(v)) for name, v in per_host.items())
    slow: Values = []
    mid: Values = []
    fast: Values = []
    for i in range(n):
        column = sorted(v[i] for v in per_host.values() if v[i] is not None)  # type: ignore[type-var]
        slow.append(column[0] if column else None)
        mid.append(column[len(column) // 2] if column else None)
        fast.append(column[-1] if column else None)
    return Line("slowest host", tuple(slow)), Line("median host", tuple(mid)), Line("fastest host", tuple(fast))


def _rates(series: Series, start: float, end: float, n: int) -> tuple[float | None, ...]:
    return tuple(series.rates(start, end, n))


def frame(st: ClusterState, window: float | None, room: int) -> Frame:
    """The four graphs over the window, about `room` values per line."""
    h = st.history
    h.flush()
    start, end = span(st, window)
    n = points(start, end, room)
    traffic = [Line("in", _rates(h.traffic_in, start, end, n)), Line("out", _rates(h.traffic_out, start, end, n))]
    if st.ps:  # an all-reduce run accounts nothing
        traffic += [Line("in*", _rates(h.accounted_in, start, end, n)),
                    Line("out*", _rates(h.accounted_out, start, end, n))]
    who = "PS" if st.ps or not st.allreduce else "all-reduce"
    return Frame(start, end, n, (
        Graph("examples", "cluster examples/s", (Line("examples/s", _rates(h.examples, start, end, n)),)),
        Graph("steps", "steps/s per worker", _per_worker(st, start, end, n)),
        Graph("loss", "loss", (Line("loss", tuple(h.loss.levels(start, end, n))),)),
        Graph("traffic", f"{who} traffic B/s (* accounted)" if st.ps else f"{who} traffic B/s", tuple(traffic)),
    ))


def host_levels(st: ClusterState, name: str, window: float | None, n: int) -> tuple[Values, Values, Values]:
    """A host's CPU, memory and GPU utilisation (%) in n slices of the window (None: no sample)."""
    start, end = span(st, window)
    hs = st.history.hosts.get(name)
    if hs is None:
        return [None] * n, [None] * n, [None] * n
    return hs.cpu.levels(start, end, n), hs.mem.levels(start, end, n), hs.gpu.levels(start, end, n)
