"""One cell through the real lifecycle: plan → start → collector/agent telemetry → warm-up → measure → stop.

The cluster is started with `orchestrator.run.launch.start`, watched through `Collector.for_record`
(its state a RecordingState, so every sample is kept), ended with `orchestrator.run.stop.stop`, whose
verification (nothing of the run left) is recorded, and, in a cell timed in steps, followed to its end
with `orchestrator.monitor.status.read_run`. Whatever happens (a failure, Ctrl-C) the cluster is stopped
before `run_cell` returns: a failed cell is a result with its error, an interrupted one is marked so and
the caller ends the bench.

Timeline: the cell starts; once every task that reports progress has made its first step, `warmup_s` is
discarded; the measured window follows (`seconds`, or until the run finishes its `steps`), with the kill
of the `kill` variant `at_s` into it; a kill cell then waits (outside the window) until the killed task
steps again, to say how long the cluster took to recover. A `resize` cell's window is a worker joining and
leaving (orchestrator/bench/resize_cell.py); a run its mode cannot resize is refused before its warm-up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from orchestrator.bench.cells import Cell, cell_config
from orchestrator.bench.measures import Window, cell_figures, kill_figures
from orchestrator.bench.report import CellResult
from orchestrator.bench.resize_cell import ResizeRun, refusal
from orchestrator.bench.resize_figures import ResizeMark, resize_figures
from orchestrator.bench.samples import RecordingState
from orchestrator.bench.scaling import advise, ps_ceiling
from orchestrator.bench.spec import BenchSpec
from orchestrator.config.load import read_config
from orchestrator.errors import TfclusterError
from orchestrator.monitor.collect import Collector
from orchestrator.monitor.status import read_run
from orchestrator.plan.model import ClusterPlan
from orchestrator.run import launch
from orchestrator.run.records import RunRecord
from orchestrator.run.slurm_start import start_job
from orchestrator.run.stop import stop as stop_run
from training.run.roles import reports_progress

PhaseFn = Callable[[str, float, float], None]  # phase, done, total (seconds or steps)
INTERVAL_S = 1.0  # the agents' sampling interval
POLL_S = 0.25
STATUS_EVERY_S = 2.0
STOP_GRACE_S = 2.0
RECOVERY_WAIT_S = 90.0  # a killed task's restart: the supervisor's backoff, then TensorFlow's start-up


class CellFailed(TfclusterError):
    """The cell's cluster did not train as asked (a task failed, no first step in time)."""


@dataclass
class _Live:
    record: RunRecord | None = None
    collector: Collector | None = None
    state: RecordingState | None = None
    window: Window | None = None
    killed_at: float | None = None
    marks: list[ResizeMark] = field(default_factory=list)  # a resize cell's join and leave


def reporting_tasks(plan: ClusterPlan) -> list[str]:
    return [t.name for t in plan.tasks if reports_progress(plan.mode, t.job)]


def run_cell(spec: BenchSpec, cell: Cell, plan: ClusterPlan, capacity_Bps: float,
             phase: PhaseFn) -> tuple[CellResult, bool]:
    """The cell's result, and whether the user interrupted it (Ctrl-C: the caller stops the bench)."""
    result = CellResult(cell, started=time.time(), cluster=cluster_summary(plan))
    live = _Live()
    interrupted = False
    t0 = time.monotonic()
    try:
        _run(spec, cell, plan, live, result, phase)
        result.status = "ok"
    except KeyboardInterrupt:
        result.status, result.error, interrupted = "interrupted", "interrupted by the user (Ctrl-C)", True
    except launch.StartInterrupted as exc:  # start rolled back what it had started, and says so
        result.status, result.error, interrupted = "interrupted", exc.one_line(), True
    except TfclusterError as exc:
        result.error = exc.one_line()
    except Exception as exc:  # one broken cell must not end the bench
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        interrupted = _stop(live, result, phase) or interrupted
    result.wall_s = time.monotonic() - t0
    if live.state is not None:
        result.samples = live.state.samples()
    if live.window is not None:
        result.window = (live.window.start, live.window.end)
        ps_names = sorted(t.name for t in plan.tasks if t.job == "ps")
        result.figures = cell_figures(result.samples, live.window, plan.mode, ps_names,
                                      spec.target_loss if plan.training.model == "mlp" else None)
        if live.killed_at is not None and spec.kill is not None:
            result.figures = dataclasses.replace(
                result.figures, kill=kill_figures(result.samples, live.window, spec.kill.task.name, live.killed_at))
        if cell.variant == "resize":
            result.figures = dataclasses.replace(
                result.figures, resize=resize_figures(result.samples, live.window, cell.workers, live.marks))
    result.ceiling = ceiling_with_advice(spec, plan, capacity_Bps, result)
    return result, interrupted


def ceiling_with_advice(spec: BenchSpec, plan: ClusterPlan, capacity_Bps: float,
                        result: CellResult) -> dict[str, object] | None:
    """The predicted PS ceiling, and the PS count that lifts it to the wanted rate: --steps-per-sec, else
    twice the measured per-worker rate (what "lifting" a PS-bound cell means)."""
    ceiling = ps_ceiling(plan, capacity_Bps) if capacity_Bps > 0 else None
    if ceiling is None:
        return None
    rates = list(result.figures.per_worker_steps_per_s.values()) if result.figures else []
    wanted = spec.steps_per_sec or (2 * sum(rates) / len(rates) if rates else ceiling.steps_per_s_per_worker * 2)
    advice = advise(plan, capacity_Bps, wanted)
    out: dict[str, object] = ceiling.to_json()
    if advice is not None:
        out["advice"] = {**advice.to_json(), "lines": advice.lines()}
    return out


def cluster_summary(plan: ClusterPlan) -> dict[str, object]:
    t = plan.training
    return {"trainers": reporting_tasks(plan), "ps": sum(1 for x in plan.tasks if x.job == "ps"),
            "batch_size": t.batch_size, "model": t.model, "model_args": dict(t.model_args),
            "slowdown": dict(t.slowdown), "hosts": [h.name for h in plan.hosts],
            "checkpoint_every": {"steps": t.checkpoint_every_steps, "secs": t.checkpoint_every_secs}}


def _run(spec: BenchSpec, cell: Cell, plan: ClusterPlan, live: _Live, result: CellResult, phase: PhaseFn) -> None:
    deadline = time.monotonic() + spec.cell_timeout
    phase("start", 0, 1)
    options = launch.StartOptions(timeout=spec.cell_timeout, stop_grace=STOP_GRACE_S)
    config, text = read_config(spec.hosts_file)
    if config.slurm is not None:  # the cell's job is submitted, then started through it
        started = start_job(cell_config(spec, config, cell), spec.hosts_file, text, options)
    else:
        started = launch.start(plan, spec.hosts_file, options)
    live.record = started.record
    result.run_id = started.record.run_id
    collector = live.collector = Collector.for_record(started.record, interval=INTERVAL_S)
    state = RecordingState.from_plan(started.record.plan, started.record.run_id, INTERVAL_S)
    assert isinstance(state, RecordingState)
    collector.state = live.state = state  # the dashboard's reducer, keeping every sample (bench/samples.py)
    collector.start()
    if cell.variant == "resize":
        refusal(started.record)  # before the warm-up: a refused mode costs its start only
    trainers = reporting_tasks(plan)
    _wait_first_steps(live, trainers, deadline, phase)
    warm_end = time.monotonic() + spec.warmup_s
    while time.monotonic() < warm_end:
        phase("warm-up", spec.warmup_s - (warm_end - time.monotonic()), spec.warmup_s)
        _poll(live, trainers)
    start = time.time()
    if cell.variant == "resize":
        _measure_resize(spec, cell, live, trainers, start, phase)
    elif spec.steps is None:
        _measure_seconds(spec, cell, live, trainers, start, phase)
    else:
        _measure_steps(spec, live, trainers, start, phase)


def _poll(live: _Live, trainers: list[str], skip: Collection[str] = ()) -> None:
    """One poll of the collector; a task that ended with an error fails the cell (not one killed or
    restarted on purpose: `skip`)."""
    assert live.collector is not None
    time.sleep(POLL_S)
    st = live.collector.poll()
    for tv in st.tasks.values():
        if tv.name in skip:
            continue
        if tv.failed:
            tail = _log_tail(live.collector, tv.job, tv.index)
            raise CellFailed(f"{tv.name} on {tv.host} exited with code {tv.exit_code}{tail}")


def _log_tail(collector: Collector, job: str, task: int) -> str:
    with contextlib.suppress(Exception):
        lines = [line for line in collector.task_log(job, task, 30) if line.strip()]
        if lines:
            return f": {lines[-1].strip()[:200]}"
    return ""


def _wait_first_steps(live: _Live, trainers: list[str], deadline: float, phase: PhaseFn) -> None:
    assert live.state is not None
    assert live.collector is not None
    while True:
        _poll(live, trainers)
        stepping = [n for n in trainers if live.state.tasks[n].progress_at is not None]
        phase("first steps", len(stepping), len(trainers))
        if len(stepping) == len(trainers):
            return
        if time.monotonic() > deadline:
            waiting = [n for n in trainers if n not in stepping]
            name = waiting[0]
            tv = live.state.tasks[name]
            raise CellFailed(f"no training step from {', '.join(waiting)} within the cell timeout "
                             f"({tv.state}{_log_tail(live.collector, tv.job, tv.index)})")


def _measure_seconds(spec: BenchSpec, cell: Cell, live: _Live, trainers: list[str], start: float,
                     phase: PhaseFn) -> None:
    assert live.collector is not None
    end = start + spec.seconds
    kill = spec.kill if cell.variant == "kill" else None
    killed = kill.task.name if kill is not None else None
    while time.time() < end:
        if kill is not None and live.killed_at is None and time.time() >= start + kill.at_s:
            live.collector.signal_task(kill.task.job, kill.task.index, "KILL")
            live.killed_at = time.time()
        phase("measure", time.time() - start, spec.seconds)
        _poll(live, trainers, () if killed is None else (killed,))
    live.window = Window(start, time.time())
    if kill is not None and live.killed_at is not None:
        _await_recovery(live, trainers, kill.task.name, phase)


def _await_recovery(live: _Live, trainers: list[str], task: str, phase: PhaseFn) -> None:
    """After the measured window of a kill cell: until the killed task steps again from a new process
    (its supervisor restarts it; in multi-worker-mirrored its whole group), at most RECOVERY_WAIT_S."""
    assert live.state is not None
    assert live.killed_at is not None
    steps_before = max((p.local_step for p in live.state.samples().of_task(task) if p.t <= live.killed_at),
                       default=0)
    until = time.time() + RECOVERY_WAIT_S
    while time.time() < until:
        tv = live.state.tasks[task]
        if tv.progress_at is not None and tv.progress_at > live.killed_at and (tv.local_step or 0) < steps_before:
            return
        phase("recovery", RECOVERY_WAIT_S - (until - time.time()), RECOVERY_WAIT_S)
        _poll(live, trainers, (task,))


def _measure_resize(spec: BenchSpec, cell: Cell, live: _Live, trainers: list[str], start: float,
                    phase: PhaseFn) -> None:
    """A worker joins and leaves (resize_cell.py); the window ends with it, or where it failed."""
    assert live.record is not None
    assert live.state is not None
    run = ResizeRun(spec, cell, live.record, live.state, lambda skip: _poll(live, trainers, skip), phase,
                    live.marks)
    try:
        run.measure(start)
    finally:
        live.window = Window(start, time.time())


def _measure_steps(spec: BenchSpec, live: _Live, trainers: list[str], start: float, phase: PhaseFn) -> None:
    assert live.record is not None
    assert live.state is not None
    assert spec.steps is not None
    next_status = 0.0
    while True:
        _poll(live, trainers)
        phase("measure", float(live.state.global_step or 0), float(spec.steps))
        if time.monotonic() >= next_status:
            next_status = time.monotonic() + STATUS_EVERY_S
            state = read_run(live.record).run_state
            if state == "finished":
                break
            if state in ("failed", "stopped"):
                raise CellFailed(f"the run {state} before its {spec.steps} steps")
    last = [max((p.t for p in live.state.samples().of_task(n)), default=start) for n in trainers]
    live.window = Window(start, max(start, min(last)))


def through_ctrl_c(action: Callable[[], None], attempts: int = 3) -> bool:
    """Run `action` again when Ctrl-C cuts it, up to `attempts` times: True when a Ctrl-C came. (A stop that
    a second Ctrl-C skipped would leave the cell's cluster running.)"""
    interrupted = False
    for _attempt in range(attempts):
        try:
            action()
            break
        except KeyboardInterrupt:
            interrupted = True
    return interrupted


def _stop(live: _Live, result: CellResult, phase: PhaseFn) -> bool:
    """Collect the last samples, close the collector and stop the run, verified; a Ctrl-C anywhere in the
    stop does not skip the rest of it. True when such a Ctrl-C came."""
    interrupted = through_ctrl_c(lambda: phase("stop", 0, 1))
    collector = live.collector
    if collector is not None:

        def last_samples() -> None:
            time.sleep(1.5 * INTERVAL_S)  # the samples of the window's last second are still on their way
            collector.poll()

        interrupted = through_ctrl_c(last_samples, attempts=1) or interrupted  # cut short: the samples so far
        interrupted = through_ctrl_c(collector.close) or interrupted
    record = live.record
    if record is not None:

        def stop() -> None:
            outcome = stop_run(record, grace=STOP_GRACE_S)
            result.stopped_clean = all(r.ok for r in outcome.values())

        interrupted = through_ctrl_c(stop) or interrupted
    return through_ctrl_c(lambda: phase("stop", 1, 1)) or interrupted
