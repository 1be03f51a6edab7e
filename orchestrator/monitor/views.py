"""The per-host, per-task and per-PS views the reducer keeps, and liveness as pure functions of them.

Liveness (DESIGN.md "Liveness states") is `host_reachable` and `task_liveness` of the recorded times
and the clock; nothing here reads a clock itself. `ema` and `window_buckets` turn uneven samples into
smoothed rates and sparkline buckets.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Literal, get_args

from orchestrator.monitor.events import GpuSample

STALE_INTERVALS = 3  # a value older than this many intervals no longer counts as current
EMA_TAU_S = 3.0  # smoothing time constant for rates
HISTORY_S = 60.0  # sparkline window
LOG_LEN = 500

Liveness = Literal["running", "stalled", "starting", "restarting", "exited", "unreachable"]
LIVENESS_STATES: tuple[Liveness, ...] = get_args(Liveness)


def ema(previous: float | None, value: float, dt: float, tau: float = EMA_TAU_S) -> float:
    """Exponential moving average with a time constant, so uneven sample spacing smooths evenly."""
    if previous is None:
        return value
    alpha = 1.0 - math.exp(-max(dt, 0.0) / tau)
    return previous + alpha * (value - previous)


@dataclass
class HostView:
    name: str
    created: float  # local time the host became known (the baseline before it is first heard)
    interval_s: float
    cpu_pct: float | None = None
    mem_pct: float | None = None
    gpus: tuple[GpuSample, ...] = ()
    t_sample: float | None = None  # local time of the last host_sample
    t_heard: float | None = None  # local time of the last line from its stream
    clock_offset: float = 0.0  # local - remote, from heartbeats
    stream_up: bool = False
    stream_reason: str = ""
    reachable: bool = True  # as of the last tick

    def local(self, remote_t: float) -> float:
        return remote_t + self.clock_offset


def host_reachable(host: HostView, now: float) -> bool:
    """Heard from within STALE_INTERVALS intervals (never heard: counted from when it became known)."""
    last = host.t_heard if host.t_heard is not None else host.created
    return now - last <= STALE_INTERVALS * host.interval_s


@dataclass
class TaskView:
    job: str
    task: int
    host: str
    gpu: int | None = None
    # from the supervisor's task_state
    proc_state: str | None = None
    pid: int | None = None
    exit_code: int | None = None
    restarts: int = 0
    t_state: float | None = None
    down: bool = False  # exited or restarting since it last ran (for the "running again" log line)
    held: bool = False  # stopped for good by the user: exited, and the supervisor will not start it again
    # from progress
    local_step: int | None = None
    global_step: int | None = None
    examples: int | None = None
    loss: float | None = None
    t_progress: float | None = None
    t_step_moved: float | None = None
    steps_per_s: float | None = None
    examples_per_s: float | None = None
    history: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=240))  # (t, steps/s)
    loss_history: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=240))
    _prev: tuple[float, int, int] | None = None  # remote t, local_step, examples of the last progress
    # computed by tick
    liveness: Liveness = "starting"
    age_s: float | None = None

    @property
    def name(self) -> str:
        return f"{self.job}-{self.task}"

    @property
    def expects_progress(self) -> bool:
        return self.job != "ps"

    @property
    def last_data(self) -> float | None:
        times = [t for t in (self.t_state, self.t_progress) if t is not None]
        return max(times) if times else None


def task_liveness(task: TaskView, host: HostView, now: float) -> Liveness:
    """running / stalled / starting / restarting / exited / unreachable, from recorded times and the clock."""
    if not host_reachable(host, now):
        return "unreachable"
    window = STALE_INTERVALS * host.interval_s
    if task.proc_state == "exited":
        return "exited"
    # A progress line newer than "starting"/"restarting" means the new process is already past it.
    newer_progress = task.t_progress is not None and task.t_state is not None and task.t_progress > task.t_state
    if task.proc_state == "restarting" and not newer_progress:
        return "restarting"
    if task.proc_state == "starting" and not newer_progress:
        return "starting"
    if not task.expects_progress:
        return "running"
    if task.t_progress is None or (task.t_state is not None and task.proc_state == "running"
                                   and task.t_progress < task.t_state):
        return "starting"  # alive, no progress from this process yet (TF still connecting)
    if now - task.t_progress > window:
        return "stalled"
    if task.t_step_moved is None or now - task.t_step_moved > window:
        return "stalled"
    return "running"


@dataclass
class PsTraffic:
    """Traffic of one PS task: measured by the host's kernel, and accounted by the workers."""

    name: str
    host: str
    port: int | None = None
    measured_in: float | None = None  # bytes/s, smoothed
    measured_out: float | None = None
    t_measured: float | None = None
    peers: dict[str, tuple[float, float]] = field(default_factory=dict)  # ip -> (in, out) bytes/s
    accounted_in: float | None = None  # sum over live workers (pushed to this PS)
    accounted_out: float | None = None  # (pulled from this PS)
    _prev: tuple[float, int, int] | None = None  # remote t, bytes_in, bytes_out
    _prev_peers: dict[str, tuple[int, int]] = field(default_factory=dict)
    # worker name -> (local t, in rate, out rate) from that worker's last progress
    _by_worker: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    history: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=240))  # (t, in+out)


@dataclass(frozen=True)
class LogEntry:
    t: float
    kind: str  # exit | restart | recover | stall | host-lost | host-back | info
    text: str


JOB_ORDER = {"chief": 0, "ps": 1, "worker": 2}


def task_sort_key(tv: TaskView) -> tuple[str, int, str, int]:
    return (tv.host, JOB_ORDER.get(tv.job, 9), tv.job, tv.task)


def append_window(dq: deque[tuple[float, float]], t: float, v: float) -> None:
    dq.append((t, v))
    while dq and dq[0][0] < t - HISTORY_S * 2:
        dq.popleft()


def window_buckets(history: deque[tuple[float, float]], now: float, buckets: int, window_s: float,
                   fill_forward: bool = False) -> list[float]:
    """Mean of the samples falling into each of `buckets` slices of [now - window_s, now]; an empty slice
    is 0 (nothing happened: right for rates), or with fill_forward the previous slice's value (a level,
    such as loss, did not drop to 0)."""
    sums = [0.0] * buckets
    ns = [0] * buckets
    start = now - window_s
    width = window_s / buckets
    for t, v in reversed(history):
        if t < start:
            break
        i = min(int((t - start) / width), buckets - 1)
        sums[i] += v
        ns[i] += 1
    out = [s / n if n else 0.0 for s, n in zip(sums, ns, strict=True)]
    if fill_forward:
        for i in range(1, buckets):
            if not ns[i]:
                out[i] = out[i - 1]
    return out
