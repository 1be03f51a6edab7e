"""A cell's figures from its raw samples and its measured window: pure functions, no clock, no I/O.

Rates are differences of cumulative counters between the first and the last sample inside the window
(never a mean of per-interval rates, which over-weights short intervals):
- per task: local steps/s and examples/s (progress `local_step`, `examples`), CPU % (the host's per-task
  CPU seconds);
- cluster examples/s: the sum over the tasks that train (a parameter-server-strategy coordinator's own
  events count its workers' steps again: skipped);
- updates/s: the global step's rate, as seen by the task with the most samples (asynchronous
  between-graph: one update per worker step; the synchronous modes: one per step of the whole cluster);
- per worker: each worker's steps/s; in-graph the workers run no Python of their own and every step runs
  every tower once, so each tower's rate is the client's step rate;
- PS traffic per PS task: measured (the agent's kernel counters on the PS side, in + out) and accounted
  (the bytes the trainers' progress events say they pulled and pushed in the window);
- loss against time since the first step, and the time to reach a target loss (median of 3 readings).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from orchestrator.bench.samples import CellSamples, HostSample, ProgressSample
from orchestrator.plan.names import task_name

LOSS_MEDIAN_OF = 3
CLIENT = task_name("chief", 0)  # the in-graph client, the parameter-server-strategy coordinator


@dataclass(frozen=True)
class Window:
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)

    def holds(self, t: float) -> bool:
        return self.start <= t <= self.end


@dataclass(frozen=True)
class PsFigures:
    measured_in_Bps: float | None
    measured_out_Bps: float | None
    accounted_in_Bps: float | None  # pushed by the trainers
    accounted_out_Bps: float | None  # pulled by the trainers

    @property
    def measured_Bps(self) -> float | None:
        return _add(self.measured_in_Bps, self.measured_out_Bps)

    @property
    def accounted_Bps(self) -> float | None:
        return _add(self.accounted_in_Bps, self.accounted_out_Bps)

    @property
    def measured_over_accounted(self) -> float | None:
        m, a = self.measured_Bps, self.accounted_Bps
        return None if m is None or not a else m / a

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "measured_Bps": self.measured_Bps, "accounted_Bps": self.accounted_Bps,
                "measured_over_accounted": self.measured_over_accounted}


@dataclass(frozen=True)
class CellFigures:
    window_s: float
    examples_per_s: float | None
    updates_per_s: float | None
    steps_per_s: dict[str, float]  # every task that reports progress
    per_worker_steps_per_s: dict[str, float]
    cpu_pct: dict[str, float]  # every task seen by its host's agent
    ps: dict[str, PsFigures]
    loss_curve: list[tuple[float, float]]  # (seconds since the first step, cluster loss)
    time_to_target_loss_s: float | None
    client_cpu_pct: float | None  # the in-graph client (or the parameter-server-strategy coordinator)
    kill: dict[str, Any] | None = field(default=None)
    resize: dict[str, Any] | None = field(default=None)  # a resize cell's (resize_figures.py)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ps"] = {k: v.to_json() for k, v in self.ps.items()}
        out["loss_curve"] = [[round(t, 3), round(v, 5)] for t, v in self.loss_curve]
        return out


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _span(hosts: Sequence[HostSample], window: Window) -> tuple[HostSample, HostSample] | None:
    """The first and the last of these samples whose readings were made inside the window, timed when the
    host's supervisor read them (the agent may forward one reading twice, up to a second late)."""
    readings = {h.t_read: h for h in hosts if window.holds(h.t_read)}
    if len(readings) < 2:
        return None
    return readings[min(readings)], readings[max(readings)]


def task_rates(series: Sequence[ProgressSample], window: Window) -> tuple[float | None, float | None, float | None]:
    """(local steps/s, examples/s, global steps/s) of one task's progress inside the window. A task
    restarted inside the window (its counters fell) is measured from its restart on."""
    inside = [s for s in series if window.holds(s.t)]
    for i in range(len(inside) - 1, 0, -1):
        if inside[i].local_step < inside[i - 1].local_step:
            inside = inside[i:]
            break
    if len(inside) < 2 or inside[-1].t <= inside[0].t:
        return None, None, None
    first, last = inside[0], inside[-1]
    dt = last.t - first.t
    examples = None
    if first.examples is not None and last.examples is not None:
        examples = (last.examples - first.examples) / dt
    return (last.local_step - first.local_step) / dt, examples, (last.global_step - first.global_step) / dt


def cpu_pct(hosts: Sequence[HostSample], task: str, window: Window) -> float | None:
    series = [h for h in hosts if task in h.task_cpu_s]
    span = _span(series, window)
    if span is None:
        return None
    first, last = span
    return float(100.0 * max(0.0, last.task_cpu_s[task] - first.task_cpu_s[task]) / (last.t_read - first.t_read))


def ps_measured(hosts: Sequence[HostSample], ps: str, window: Window) -> tuple[float | None, float | None]:
    span = _span([h for h in hosts if ps in h.ps_tcp], window)
    if span is None:
        return None, None
    first, last = span
    dt = last.t_read - first.t_read
    (in0, out0), (in1, out1) = first.ps_tcp[ps], last.ps_tcp[ps]
    if in1 < in0 or out1 < out0:  # the PS restarted: its counters began again
        return None, None
    return (in1 - in0) / dt, (out1 - out0) / dt


def ps_accounted(progress: Sequence[ProgressSample], ps: str, window: Window) -> tuple[float | None, float | None]:
    """Bytes pushed to (in) and pulled from (out) `ps` per second, summed over the tasks that report it:
    each task's intervals that end inside its own first..last sample in the window."""
    total_in = total_out = 0.0
    seen = False
    for task in sorted({p.task for p in progress}):
        inside = [p for p in progress if p.task == task and window.holds(p.t)]
        if len(inside) < 2 or inside[-1].t <= inside[0].t:
            continue
        pulled = sum(p.ps_bytes.get(ps, (0, 0))[0] for p in inside[1:])
        pushed = sum(p.ps_bytes.get(ps, (0, 0))[1] for p in inside[1:])
        if any(ps in p.ps_bytes for p in inside):
            seen = True
        dt = inside[-1].t - inside[0].t
        total_in += pushed / dt
        total_out += pulled / dt
    return (total_in, total_out) if seen else (None, None)


def loss_curve(progress: Sequence[ProgressSample]) -> list[tuple[float, float]]:
    """The cluster's loss (mean of each training task's latest) after each progress event, against the
    seconds since the first one."""
    latest: dict[str, float] = {}
    out: list[tuple[float, float]] = []
    trainers = [p for p in progress if not p.coordinator]
    if not trainers:
        return out
    t0 = trainers[0].t
    for p in trainers:
        if p.loss is None:
            continue
        latest[p.task] = p.loss
        out.append((p.t - t0, statistics.fmean(latest.values())))
    return out


def time_to_loss(curve: Sequence[tuple[float, float]], target: float) -> float | None:
    """Seconds until the median of the last LOSS_MEDIAN_OF readings is at or below `target`."""
    for i in range(LOSS_MEDIAN_OF - 1, len(curve)):
        recent = [v for _, v in curve[i - LOSS_MEDIAN_OF + 1 : i + 1]]
        if statistics.median(recent) <= target:
            return curve[i][0]
    return None


def cluster_examples(progress: Sequence[ProgressSample], tasks: Sequence[str], window: Window) -> float | None:
    rates = [task_rates([p for p in progress if p.task == t], window)[1] for t in tasks]
    known = [r for r in rates if r is not None]
    return sum(known) if known else None


def cell_figures(samples: CellSamples, window: Window, mode: str, ps_names: Sequence[str],
                 target_loss: float | None = None) -> CellFigures:
    trainers = sorted({p.task for p in samples.progress if not p.coordinator})
    steps: dict[str, float] = {}
    updates: tuple[int, float] | None = None
    for task in sorted({p.task for p in samples.progress}):
        series = samples.of_task(task)
        local, _, gstep = task_rates(series, window)
        if local is not None:
            steps[task] = local
        count = sum(1 for p in series if window.holds(p.t))
        if gstep is not None and (updates is None or count > updates[0]):
            updates = (count, gstep)
    per_worker = {t: v for t, v in steps.items() if t.startswith("worker:")}
    if mode == "in-graph" and CLIENT in steps:
        towers = sorted({t for h in samples.hosts for t in h.task_cpu_s if t.startswith("worker:")})
        per_worker = dict.fromkeys(towers, steps[CLIENT])
    tasks_seen = sorted({t for h in samples.hosts for t in h.task_cpu_s})
    cpu = {t: v for t in tasks_seen if (v := cpu_pct(samples.hosts, t, window)) is not None}
    ps: dict[str, PsFigures] = {}
    for name in ps_names:
        m_in, m_out = ps_measured(samples.hosts, name, window)
        a_in, a_out = ps_accounted(samples.progress, name, window)
        ps[name] = PsFigures(m_in, m_out, a_in, a_out)
    curve = loss_curve(samples.progress)
    client = cpu.get(CLIENT) if mode in ("in-graph", "parameter-server-strategy") else None
    return CellFigures(
        window_s=window.seconds,
        examples_per_s=cluster_examples(samples.progress, trainers, window),
        updates_per_s=None if updates is None else updates[1],
        steps_per_s=steps, per_worker_steps_per_s=per_worker, cpu_pct=cpu, ps=ps, loss_curve=curve,
        time_to_target_loss_s=None if target_loss is None else time_to_loss(curve, target_loss),
        client_cpu_pct=client,
    )


def kill_figures(samples: CellSamples, window: Window, task: str, killed_at: float) -> dict[str, Any]:
    """Around a SIGKILL at `killed_at`: the cluster's examples/s before and after, and when the task
    reported progress again from a new process (its counters start over)."""
    trainers = sorted({p.task for p in samples.progress if not p.coordinator})
    before = cluster_examples(samples.progress, trainers, Window(window.start, killed_at))
    after = cluster_examples(samples.progress, trainers, Window(killed_at, window.end))
    series = samples.of_task(task)
    last_before = max((p.local_step for p in series if p.t <= killed_at), default=None)
    back = next((p.t for p in series if p.t > killed_at and last_before is not None and p.local_step < last_before),
                None)
    restarts = max((s.restarts for s in samples.states if s.task == task), default=0)
    return {"task": task, "killed_at_s": killed_at - window.start, "examples_per_s_before": before,
            "examples_per_s_after": after, "progress_again_after_s": None if back is None else back - killed_at,
            "restarts": restarts}
