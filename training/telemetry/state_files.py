"""Typed decoders for what the supervisor leaves on its host and what the host reports over the transport.

- `state/<job>-<task>.json` (TaskStateFile) and `state/supervisor-<host>.json` (SupervisorStateFile),
  written atomically by training/supervisor/core.py (and pushed by `--detach` while `start` waits);
- a process of the run (RunProcess), what a stop signalled and left (StopReport: orchestrator/run/
  sh_stop.py), and the JSON line of `training.supervisor.hold` (HoldReport).

These are the wire formats only: what a task's state means (failed, held, its liveness) is judged in
one place, the orchestrator's reducer (orchestrator/monitor/). The writers stay plain dicts (the
supervisor imports nothing it does not need at start-up); the orchestrator reads every one of them
through these decoders only. A decoder raises StateFileError for a value that is not what the writer
writes; a consumer skips such a file, never crashes on it. Stdlib only (shipped with training/, though
only the orchestrator imports it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from typing import Literal

    ProcessState = Literal["starting", "running", "exited", "restarting"]
    SupervisorState = Literal["starting", "running", "finished", "failed", "stopped", "crashed"]

TASK_STATES = ("starting", "running", "exited", "restarting")
SUPERVISOR_STATES = ("starting", "running", "finished", "failed", "stopped", "crashed")


class StateFileError(ValueError):
    """A state file or report that is not what the supervisor writes."""


def _get(d: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    if key not in d:
        if default is ...:
            raise StateFileError(f"no {key!r}")
        return default
    value = d[key]
    if value is None and default is None:
        return None
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise StateFileError(f"{key!r} is a boolean")
    if not isinstance(value, kind):
        raise StateFileError(f"{key!r} is {type(value).__name__}")
    return value


def _object(raw: object, what: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise StateFileError(f"{what} is {type(raw).__name__}, not an object")
    return raw


@dataclass(frozen=True)
class TaskStateFile:
    host: str
    job: str
    task: int
    state: ProcessState  # the supervisor's word: what the task's process is doing
    pid: int | None
    restarts: int
    exit_code: int | None
    signal: int | None
    final: bool
    updated_at: float
    started_at: float | None = None
    exited_at: float | None = None
    next_start: float | None = None
    history: tuple[dict[str, Any], ...] = ()
    # Who ended it for good: None, "user" (stopped for good from the dashboard), "run" (the run finished
    # or failed and its supervisors ended the rest), "stop" (`tfcluster stop`). Never a failure.
    stopped_by: str | None = None
    restarts_left: int | None = None  # of its restart budget (training/supervisor/policy.py)
    restart_reason: str | None = None  # while restarting: "failure" or "group" (multi-worker-mirrored)
    error: str | None = None  # why it could not run at all (e.g. its port is taken)

    @classmethod
    def decode(cls, raw: object) -> TaskStateFile:
        d = _object(raw, "a task state")
        state = _get(d, "state", str)
        if state not in TASK_STATES:
            raise StateFileError(f"unknown task state {state!r}")
        num = (int, float)
        return cls(
            host=_get(d, "host", str), job=_get(d, "job", str), task=_get(d, "task", int),
            state=cast("ProcessState", state), pid=_get(d, "pid", int, None), restarts=_get(d, "restarts", int, 0),
            exit_code=_get(d, "exit_code", int, None), signal=_get(d, "signal", int, None),
            final=bool(_get(d, "final", bool, False)), updated_at=float(_get(d, "updated_at", num, 0.0)),
            started_at=_get(d, "started_at", num, None), exited_at=_get(d, "exited_at", num, None),
            next_start=_get(d, "next_start", num, None),
            history=tuple(h for h in _get(d, "history", list, []) if isinstance(h, dict)),
            stopped_by=_get(d, "stopped_by", str, None), restarts_left=_get(d, "restarts_left", int, None),
            restart_reason=_get(d, "restart_reason", str, None), error=_get(d, "error", str, None),
        )


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

    @classmethod
    def decode(cls, raw: object) -> SupervisorStateFile:
        d = _object(raw, "a supervisor state")
        state = _get(d, "state", str)
        if state not in SUPERVISOR_STATES:
            raise StateFileError(f"unknown supervisor state {state!r}")
        num = (int, float)
        return cls(
            host=_get(d, "host", str), pid=_get(d, "pid", int), state=cast("SupervisorState", state),
            run_id=_get(d, "run_id", str, None), started_at=_get(d, "started_at", num, None),
            ended_at=_get(d, "ended_at", num, None), updated_at=_get(d, "updated_at", num, None),
            outcome=_get(d, "outcome", str, None),
            epoch=_get(d, "epoch", int, 0),
        )


@dataclass(frozen=True)
class RunProcess:
    pid: int
    pgid: int
    task: str  # TFCLUSTER_TASK_ID: "<job>-<i>#<attempt>", "" for the supervisor
    args: str


def decode_state_line(raw: object) -> TaskStateFile | SupervisorStateFile:
    """One state file's content, by its `kind`."""
    d = _object(raw, "a state file")
    if d.get("kind") == "supervisor":
        return SupervisorStateFile.decode(d)
    return TaskStateFile.decode(d)


def _pids(d: dict[str, Any], key: str) -> tuple[int, ...]:
    return tuple(p for p in _get(d, key, list, []) if isinstance(p, int) and not isinstance(p, bool))


@dataclass(frozen=True)
class HoldReport:
    """`python -m training.supervisor.hold`: the hold file written and the task's processes SIGTERMed."""

    hold: str
    terminated: tuple[int, ...] = ()

    @classmethod
    def decode(cls, raw: object) -> HoldReport:
        d = _object(raw, "a hold report")
        return cls(hold=_get(d, "hold", str), terminated=_pids(d, "terminated"))


@dataclass(frozen=True)
class StopReport:
    """A stop on one host: what was signalled, and what a fresh look saw left afterwards; `absent`: no
    run dir and no process of the run there."""

    absent: bool = False
    terminated: tuple[int, ...] = ()
    killed: tuple[int, ...] = ()
    remaining: tuple[RunProcess, ...] = ()
    unsure: str = ""  # why `remaining` may miss processes (orchestrator/run/sh_stop.py); "" when it is known
