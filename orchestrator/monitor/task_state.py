"""A task as every reader sees it: `TaskState`, one frozen snapshot per task, and its one name.

Built from the supervisor's TaskRecord (training/telemetry/task_record.py, the wire record) and what the
reducer judged of it. The reducer (reducer.py) folds events into its own working state and, at each
tick, hands out one `TaskState` per task; `status`, `dash` (the TUI, `--once`, `--json`, Prometheus), `start --wait` and
the mode bench read only these, so no two of them can judge a task differently. `TaskState.to_json`
is a task's one JSON shape (`status --json` and `dash --once --json` print the same document).

Its `name` is the one name of orchestrator/plan/names.py (`worker:1`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from training.telemetry.task_record import held_by_user

# What a task is doing, as a word (DESIGN.md "Liveness states"); `not-started` only where its host has
# no run dir: the run never got there.
Liveness = Literal["running", "stalled", "starting", "restarting", "exited", "unreachable", "lost", "not-started"]
LIVENESS_STATES: tuple[Liveness, ...] = get_args(Liveness)
# A run as a whole, from its tasks' ends, its supervisors' outcome and its hosts' reachability; `pending`
# only for a Slurm run whose job waits for its nodes (nothing of it has run).
RunState = Literal["pending", "running", "finished", "failed", "stopped", "partial"]
RUN_STATES: tuple[RunState, ...] = get_args(RunState)
# Whether a task writes progress events: the built-in trainers do, servers never, a user's program maybe.
Reports = Literal["yes", "no", "maybe"]
JOB_ORDER = {"chief": 0, "ps": 1, "worker": 2}


@dataclass(frozen=True)
class TaskGpu:
    """One GPU a task is planned on or holds memory on (orchestrator/monitor/gpu_use.py): the GPU's own
    figures, and the MiB the task's own processes hold there (None: not known; 0: none)."""

    index: int
    util_pct: float | None
    mem_used_mb: float | None  # by every process on the GPU
    mem_total_mb: float | None
    task_mem_mb: float | None

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "util_pct": self.util_pct, "mem_used_mb": self.mem_used_mb,
                "mem_total_mb": self.mem_total_mb, "task_mem_mb": _round(self.task_mem_mb, 1)}


@dataclass(frozen=True)
class TaskState:
    name: str
    job: str
    index: int
    host: str
    gpus: tuple[int, ...]  # its GPUs as the plan gives them (physical indexes), none = the CPU
    state: Liveness
    process_state: str | None  # the supervisor's last word: starting | running | exited | restarting
    pid: int | None
    exit_code: int | None  # a signal N shows as -N
    signal: int | None
    final: bool  # never started again
    failed: bool  # ended for good with an error, not by the user, the run or a stop
    stopped_by: str | None  # "user" (stopped for good), "run" (ended with the run), "stop"
    restarts: int
    restarts_left: int | None
    restart_reason: str | None  # while restarting: "failure" or "group"
    error: str | None  # why it could not run, or why its last attempt failed
    updated_at: float | None  # when its supervisor last recorded its state (the host's clock, as written)
    reports: Reports
    coordinator: bool  # its steps are its workers' (parameter-server-strategy): counted once
    local_step: int | None
    global_step: int | None
    examples: int | None
    loss: float | None
    steps_per_s: float | None  # of its current process only: None while it is down or starting
    examples_per_s: float | None
    progress_at: float | None  # local time of its last progress
    age_s: float | None  # of its freshest data
    cpu_s: float | None
    no_progress_reported: bool  # alive and judged by its CPU: it reports no progress tfcluster can read
    gpu_use: tuple[TaskGpu, ...] = ()  # its GPUs' use and its own memory on each (from its host's facts)
    on_cpu_suspected: bool = False  # planned on a GPU, settled, and its processes hold no GPU memory

    @classmethod
    def of(cls, values: dict[str, Any]) -> TaskState:
        """From every field by name, without the generated __init__'s one frozen setattr per field: the
        reducer builds one per task per tick, where that __init__ was most of the tick's CPU. The
        instance is as frozen and compares as one built by TaskState(...); tests/unit/test_state.py checks it."""
        state = object.__new__(cls)
        object.__setattr__(state, "__dict__", values)
        return state

    @property
    def held(self) -> bool:
        """Stopped for good by the user: decided where its record is (training/telemetry/task_record.py)."""
        return held_by_user(self.stopped_by)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "job": self.job, "index": self.index, "host": self.host, "gpus": list(self.gpus),
            "state": self.state,
            "stale": self.state == "unreachable", "process_state": self.process_state, "pid": self.pid,
            "exit_code": self.exit_code, "signal": self.signal, "final": self.final, "failed": self.failed,
            "held": self.held, "stopped_by": self.stopped_by, "restarts": self.restarts,
            "restarts_left": self.restarts_left, "restart_reason": self.restart_reason, "error": self.error,
            "updated_at": self.updated_at,
            "local_step": self.local_step, "global_step": self.global_step, "loss": _round(self.loss, 6),
            "steps_per_s": _round(self.steps_per_s), "examples_per_s": _round(self.examples_per_s),
            "age_s": _round(self.age_s, 2), "cpu_s": _round(self.cpu_s, 2),
            "no_progress_reported": self.no_progress_reported,
            "gpu_use": [g.to_json() for g in self.gpu_use], "on_cpu_suspected": self.on_cpu_suspected,
        }


def _round(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(x, digits)


def task_sort_key(t: TaskState) -> tuple[str, int, str, int]:
    """Host, then chief, ps, workers, then index: the order tables list tasks in."""
    return (t.host, JOB_ORDER.get(t.job, 9), t.job, t.index)
