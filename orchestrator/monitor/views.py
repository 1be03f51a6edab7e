"""The reducer's working state per host, task and PS, and its judgements as pure functions of them.

`TaskTrack` is what the reducer keeps of a task between events: its supervisor's last TaskRecord (the
wire record, training/telemetry/task_record.py, kept as it came) and what progress and the host's facts
add (rates, histories, CPU); readers never see it: `snapshot` turns it into the frozen `TaskState` (task_state.py) they all read. Liveness
(DESIGN.md "Liveness states") is `host_reachable` and `task_liveness`, a task's failure `task_failed`,
the run's state `run_state`: functions of the recorded times and the clock; nothing here reads a clock
itself. `ema` and `window_buckets` turn uneven samples into smoothed rates and sparkline buckets.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from orchestrator.monitor.events import GpuSample
from orchestrator.monitor.gpu_use import task_gpu_use
from orchestrator.monitor.task_state import Liveness, Reports, RunState, TaskState
from orchestrator.plan.names import task_name
from training.telemetry.task_record import TaskRecord

STALE_INTERVALS = 3  # a value older than this many intervals no longer counts as current
EMA_TAU_S = 3.0  # smoothing time constant for rates
HISTORY_S = 60.0  # sparkline window
LOG_LEN = 500


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
    t_stream_up: float | None = None  # local time its stream (re)connected: its backlog replays after it
    clock_offset: float = 0.0  # local - remote, from heartbeats
    stream_up: bool = False
    stream_reason: str = ""
    reachable: bool = True  # as of the last tick
    supervisor_alive: bool | None = None  # from the host's facts; None = not known
    # From the supervisor's own state file (a read of the host, or the agent's facts); None = not known.
    supervisor_state: str | None = None  # starting | running | finished | failed | stopped | crashed
    supervisor_pid: int | None = None
    outcome: str | None = None  # the run's, as this host's supervisor decided it
    processes: int | None = None  # live processes of the run there; None = not known
    absent: bool = False  # the run dir is not there: the run never reached this host (or was purged)
    error: str | None = None  # why it could not be read

    def local(self, remote_t: float) -> float:
        return remote_t + self.clock_offset


def host_reachable(host: HostView, now: float) -> bool:
    """Heard from within STALE_INTERVALS intervals (never heard: counted from when it became known)."""
    last = host.t_heard if host.t_heard is not None else host.created
    return now - last <= STALE_INTERVALS * host.interval_s


@dataclass
class TaskTrack:
    job: str
    task: int
    host: str
    gpus: tuple[int, ...] = ()
    # Whether this task writes progress events itself (the built-in trainers do; servers never; a user's
    # program may: then "maybe", and liveness falls back to its processes' CPU until it does).
    reports: Reports = "yes"
    # from the supervisor: its last record of the task as it is (None: none yet), and what the reducer
    # judged of the records so far
    record: TaskRecord | None = None
    pid: int | None = None  # its last known process (a record while it restarts names none)
    exit_code: int | None = None  # of its last process, a signal N as -N; kept while it restarts
    t_state: float | None = None  # local time of the record
    down: bool = False  # exited or restarting since it last ran (for the "running again" log line)
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
    _prev: tuple[float, int, int | None] | None = None  # remote t, local_step, examples of the last progress
    # from the host's facts (training/telemetry/host_facts.py)
    procs: int | None = None  # live processes; None = not known
    cpu_s: float | None = None
    t_cpu_moved: float | None = None  # local time its CPU counter last moved
    sigstopped: bool = False
    t_listening: float | None = None  # local time its TF server was first seen listening (it has started)
    coordinator: bool = False  # its steps are its workers' (parameter-server-strategy): not summed twice
    # GPU use (gpu_use.py): its CUDA_VISIBLE_DEVICES' GPUs, the MiB its processes hold on each GPU (None:
    # not read), since when its current process runs (local time), and the last tick's `on CPU?`
    cuda_gpus: tuple[int, ...] = ()
    gpu_mem: dict[int, float | None] | None = None
    t_running: float | None = None
    on_cpu: bool = False
    # computed by tick
    liveness: Liveness = "starting"
    age_s: float | None = None
    name: str = field(init=False)  # the one name, spelled once (read per task per tick)

    def __post_init__(self) -> None:
        self.name = task_name(self.job, self.task)

    @property
    def last_data(self) -> float | None:
        times = [t for t in (self.t_state, self.t_progress, self.t_cpu_moved) if t is not None]
        return max(times) if times else None


def task_liveness(task: TaskTrack, host: HostView, now: float) -> Liveness:
    """One task's liveness from recorded times, the host's facts and the clock (DESIGN.md "Liveness").

    unreachable: its host's stream is silent. exited: it ended for good. lost: its supervisor is gone and
    so are its processes (nobody will restart it or say how it ended). restarting/starting: as its
    supervisor says, until its new process reports progress or its TF server listens. Then: a task that
    reports progress is running while its global step moves, else stalled; a server (ps, in-graph
    worker) is running while its processes live; a program that reports nothing is running while its
    CPU time moves, stalled when it does not (or when it is SIGSTOPped)."""
    if not host_reachable(host, now):
        return "unreachable"
    proc_state = task.record.state if task.record is not None else None
    if proc_state is None and host.absent:
        return "not-started"
    if proc_state == "exited":
        return "exited"
    if host.supervisor_alive is False and task.procs == 0:
        return "lost"
    window = STALE_INTERVALS * host.interval_s
    since = task.t_state  # progress older than the supervisor's last word is the previous process's
    progress = task.t_progress is not None and (since is None or task.t_progress >= since)
    if proc_state == "restarting" and not progress:
        return "restarting"
    if task.sigstopped:
        return "stalled"
    if progress:
        assert task.t_progress is not None
        if now - task.t_progress > window or task.t_step_moved is None or now - task.t_step_moved > window:
            return "stalled"
        return "running"
    if task.reports == "no":
        return "running" if proc_state == "running" and task.procs != 0 else "starting"
    if task.reports == "yes":
        return "starting"  # a trainer's start-up ends with its first step
    # A program that reports nothing (yet): running while its CPU time moves (its first window after its
    # supervisor started it included), stalled when it does not.
    if proc_state != "running":
        return "starting"
    last_work = max(t for t in (since, task.t_cpu_moved) if t is not None) if since or task.t_cpu_moved else None
    return "running" if last_work is not None and now - last_work <= window else "stalled"


@dataclass
class PsTraffic:
    """Traffic of one PS task: measured by the host's kernel (rates its supervisor made), and accounted by
    the workers."""

    name: str
    host: str
    port: int | None = None
    measured_in: float | None = None  # bytes/s, smoothed
    measured_out: float | None = None
    t_measured: float | None = None
    peers: dict[str, tuple[float, float]] = field(default_factory=dict)  # ip -> (in, out) bytes/s
    accounted_in: float | None = None  # sum over live workers (pushed to this PS)
    accounted_out: float | None = None  # (pulled from this PS)
    # worker name -> (local t, in rate, out rate) from that worker's last progress
    _by_worker: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    history: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=240))  # (t, in+out)


@dataclass(frozen=True)
class LogEntry:
    t: float
    kind: str  # exit | restart | recover | stall | host-lost | host-back | info
    text: str


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


def task_failed(task: TaskTrack, host: HostView) -> bool:
    """Ended for good with an error (a signal counts), not by the user, the run or a stop."""
    stopped = host.supervisor_state == "stopped"  # `tfcluster stop` ended it, whatever its code says
    rec = task.record
    return (rec is not None and rec.state == "exited" and task.exit_code not in (0, None)
            and rec.stopped_by is None and not stopped)


# What a task not recorded yet shows: no state, nothing ended, no restart.
_NO_RECORD = TaskRecord(0.0, "", "", 0, "")
# Rates are of the current process: none while it is down, starting again or gone.
NO_RATES = ("restarting", "exited", "lost", "starting", "not-started")


def snapshot(t: TaskTrack, host: HostView) -> TaskState:
    """The frozen TaskState of a track as the last tick judged it (built per task per tick: TaskState.of)."""
    rates = t.liveness not in NO_RATES
    rec = t.record or _NO_RECORD
    return TaskState.of({
        "name": t.name, "job": t.job, "index": t.task, "host": t.host, "gpus": t.gpus, "state": t.liveness,
        "process_state": rec.state or None, "pid": t.pid, "exit_code": t.exit_code, "signal": rec.signal,
        "final": rec.final or rec.state == "exited", "failed": task_failed(t, host), "stopped_by": rec.stopped_by,
        "restarts": rec.restarts, "restarts_left": rec.restarts_left,
        "restart_reason": rec.restart_reason if rec.state == "restarting" else None, "error": rec.error,
        "updated_at": rec.t if t.record is not None else None, "reports": t.reports, "coordinator": t.coordinator,
        "local_step": t.local_step, "global_step": t.global_step, "examples": t.examples, "loss": t.loss,
        "steps_per_s": t.steps_per_s if rates else None, "examples_per_s": t.examples_per_s if rates else None,
        "progress_at": t.t_progress, "age_s": t.age_s, "cpu_s": t.cpu_s,
        "no_progress_reported": t.reports != "no" and t.t_progress is None and t.liveness in ("running", "stalled"),
        "gpu_use": task_gpu_use(t.cuda_gpus, t.gpu_mem, host.gpus), "on_cpu_suspected": t.on_cpu,
    })


ENDED_BY_USER_OR_RUN = ("user", "run")
STOPPED_RECORDS = ("stopped", "purged", "failed-to-start", "interrupted")


def run_state(tasks: Iterable[TaskState], hosts: Iterable[HostView], record_status: str | None = None) -> RunState:
    """The run's state from its tasks and every host's view, the supervisors' outcome (their success
    policy) first: failed as soon as one task failed for good; once all ended, finished (those the user
    stopped for good or the run ended included) or stopped (the user stopped all, or `stop`); partial
    while a host cannot be read or a task is lost or never started; else running. `record_status` is
    the local record's word (a run `stop` ended, or whose start was interrupted, with nothing left)."""
    tasks, hosts = list(tasks), list(hosts)
    outcomes = {h.outcome for h in hosts if h.outcome}
    all_final = bool(tasks) and all(t.final for t in tasks)
    if any(t.failed for t in tasks) or "failed" in outcomes:
        return "failed"
    if all_final and (all(t.held for t in tasks) or "stopped" in outcomes):
        return "stopped"
    if all_final and ("finished" in outcomes or all(t.exit_code == 0 or t.stopped_by in ENDED_BY_USER_OR_RUN
                                                    for t in tasks)):
        return "finished"
    if any(not h.reachable for h in hosts):
        return "partial"  # what runs there is unknown: never call such a run stopped or running
    nothing_left = all(h.processes == 0 for h in hosts)
    if nothing_left and (record_status in STOPPED_RECORDS or any(h.supervisor_state == "stopped" for h in hosts)):
        return "stopped"
    if record_status == "partial" or any(t.state in ("not-started", "lost", "unreachable") for t in tasks):
        return "partial"
    return "running"
