"""Typed decoders for what the supervisor leaves on its host and what the host reports over the transport.

- `state/supervisor-<host>.json` (SupervisorStateFile), written atomically by training/supervisor/core.py
  (and pushed by `--detach` while `start` waits), beside each task's `state/<job>-<task>.json`, a
  TaskRecord (task_record.py: the one record of a task, its own decoder);
- a process of the run (RunProcess), what a stop signalled and left (StopReport: orchestrator/run/
  sh_stop.py), and the JSON line of `training.supervisor.hold` (HoldReport).

These are the wire formats only: what a task's state means (failed, its liveness) is judged in one
place, the orchestrator's reducer (orchestrator/monitor/). The writers stay plain dicts (the supervisor
imports nothing it does not need at start-up); the orchestrator reads every one of them through these
decoders only. A decoder raises StateFileError (wire.py) for a value that is not what the writer
writes; a consumer skips such a file, never crashes on it. Stdlib only (shipped with training/, though
only the orchestrator imports it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from .task_record import TaskRecord
from .wire import NUMBER, StateFileError, as_object, take

if TYPE_CHECKING:
    from typing import Literal

    SupervisorState = Literal["starting", "running", "finished", "failed", "stopped", "crashed"]

SUPERVISOR_STATES = ("starting", "running", "finished", "failed", "stopped", "crashed")


@dataclass(frozen=True)
class SupervisorStateFile:
    host: str
    pid: int
    state: SupervisorState
    run_id: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    updated_at: float | None = None
    outcome: str | None = None  # the run's, once the success policy decided: finished | failed | stopped
    epoch: int = 0  # group restarts seen (multi-worker-mirrored)
    resize_serial: int = 0  # the newest `tfcluster resize` it has applied (training/supervisor/resize.py)

    @classmethod
    def decode(cls, raw: object) -> SupervisorStateFile:
        d = as_object(raw, "a supervisor state")
        state = take(d, "state", str)
        if state not in SUPERVISOR_STATES:
            raise StateFileError(f"unknown supervisor state {state!r}")
        return cls(
            host=take(d, "host", str), pid=take(d, "pid", int), state=cast("SupervisorState", state),
            run_id=take(d, "run_id", str, None), started_at=take(d, "started_at", NUMBER, None),
            ended_at=take(d, "ended_at", NUMBER, None), updated_at=take(d, "updated_at", NUMBER, None),
            outcome=take(d, "outcome", str, None),
            epoch=take(d, "epoch", int, 0), resize_serial=take(d, "resize_serial", int, 0),
        )


@dataclass(frozen=True)
class RunProcess:
    pid: int
    pgid: int
    task: str  # TFCLUSTER_TASK_ID: "<job>-<i>#<attempt>", "" for the supervisor
    args: str


def decode_state_line(raw: object) -> TaskRecord | SupervisorStateFile:
    """One state file's content, by its `kind`: a supervisor's, else a task's record (task_record.py)."""
    d = as_object(raw, "a state file")
    if d.get("kind") == "supervisor":
        return SupervisorStateFile.decode(d)
    return TaskRecord.from_json(d)


def _pids(d: dict[str, Any], key: str) -> tuple[int, ...]:
    return tuple(p for p in take(d, key, list, []) if isinstance(p, int) and not isinstance(p, bool))


@dataclass(frozen=True)
class HoldReport:
    """`python -m training.supervisor.hold`: the hold file written and the task's processes SIGTERMed."""

    hold: str
    terminated: tuple[int, ...] = ()

    @classmethod
    def decode(cls, raw: object) -> HoldReport:
        d = as_object(raw, "a hold report")
        return cls(hold=take(d, "hold", str), terminated=_pids(d, "terminated"))


@dataclass(frozen=True)
class StopReport:
    """A stop on one host: what was signalled, and what a fresh look saw left afterwards; `absent`: no
    run dir and no process of the run there."""

    absent: bool = False
    terminated: tuple[int, ...] = ()
    killed: tuple[int, ...] = ()
    remaining: tuple[RunProcess, ...] = ()
    unsure: str = ""  # why `remaining` may miss processes (orchestrator/run/sh_stop.py); "" when it is known
