"""`TaskRecord`: the one record of a task's state on the wire, from the supervisor to every reader.

The supervisor (training/supervisor/core.py) builds one at every change of a task's state and writes its
`to_json()` three times, the same document each time: as a line of events/supervisor-<host>.jsonl (the
`task_state` event the agent streams to the dashboard), as state/<job>-<index>.json (what one read of
the host finds: `status`, `dash --once`) and, with `--detach`, to `start` while it waits. Every reader
decodes it with `TaskRecord.from_json`, the one decoder, and the orchestrator's reducer builds its
TaskState (orchestrator/monitor/task_state.py) from it.

    {"kind": "task_state", "v": 1, "t": <host time>, "host", "job", "task", "state", "pid", "restarts",
     "exit_code", "signal", "final", "stopped_by", "held", "restarts_left", "restart_reason", "error",
     "started_at", "exited_at", "next_start", "history"}

`held` (stopped for good by the user: never a failure) is decided here only (`held_by_user`), and
written for readers of the raw files; the decoder derives it again rather than trusting a second copy.
A state file of an older supervisor (`"kind": "task"`, its time as `updated_at`) decodes the same.

A plain class with slots, not a dataclass: the supervisor imports it at every start on every host, and
`dataclasses` alone costs it about 10 ms (training/run/layout.py). Never changed once built. Stdlib only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .schema import KIND_TASK_STATE, SCHEMA_VERSION
from .wire import NUMBER, StateFileError, as_object, take

if TYPE_CHECKING:
    from typing import Any

TASK_STATES = ("starting", "running", "exited", "restarting")
HISTORY_KEPT = 20  # the task's last exits carried in its record


def held_by_user(stopped_by: str | None) -> bool:
    """Stopped for good by the user (training/supervisor/hold.py): final, and never a failure."""
    return stopped_by == "user"


class TaskRecord:
    __slots__ = ("error", "exit_code", "exited_at", "final", "history", "host", "job", "next_start", "pid",
                 "restart_reason", "restarts", "restarts_left", "signal", "started_at", "state", "stopped_by",
                 "t", "task")

    def __init__(self, t: float, host: str, job: str, task: int, state: str, pid: int | None = None,
                 exit_code: int | None = None, restarts: int = 0, signal: int | None = None, final: bool = False,
                 stopped_by: str | None = None, restarts_left: int | None = None,
                 restart_reason: str | None = None, error: str | None = None, started_at: float | None = None,
                 exited_at: float | None = None, next_start: float | None = None,
                 history: tuple[dict[str, Any], ...] = ()) -> None:
        self.t = t  # when the supervisor recorded it (the host's clock)
        self.host = host
        self.job = job
        self.task = task  # the task's index in its job
        self.state = state  # the supervisor's word: starting | running | exited | restarting
        self.pid = pid
        self.exit_code = exit_code  # None when a signal ended it
        self.restarts = restarts  # every restart, for display (its budget may have been reset)
        self.signal = signal  # the signal that ended the process, when one did
        self.final = final  # never started again
        # Who ended it for good: None, "user" (held), "run" (the run's outcome ended the rest), "stop"
        # (`tfcluster stop`). Never a failure.
        self.stopped_by = stopped_by
        self.restarts_left = restarts_left  # of its restart budget (training/supervisor/policy.py)
        self.restart_reason = restart_reason  # while restarting: "failure" or "group"
        self.error = error  # why it could not run (its port taken), or why its last attempt failed
        self.started_at = started_at
        self.exited_at = exited_at
        self.next_start = next_start  # while restarting: when it starts again
        self.history = history  # its last exits: {"pid", "exit_code", "signal", "at"}

    @property
    def held(self) -> bool:
        return held_by_user(self.stopped_by)

    def to_json(self) -> dict[str, Any]:
        """The one document: the event line, the state file and the pushed line. (`kind` first: a reader
        can tell a record from a supervisor's state by its first bytes.)"""
        return {"kind": KIND_TASK_STATE, "v": SCHEMA_VERSION, "t": self.t, "host": self.host, "job": self.job,
                "task": self.task, "state": self.state, "pid": self.pid, "restarts": self.restarts,
                "exit_code": self.exit_code, "signal": self.signal, "final": self.final,
                "stopped_by": self.stopped_by, "held": self.held, "restarts_left": self.restarts_left,
                "restart_reason": self.restart_reason, "error": self.error, "started_at": self.started_at,
                "exited_at": self.exited_at, "next_start": self.next_start, "history": list(self.history)}

    @classmethod
    def from_json(cls, raw: object) -> TaskRecord:
        """The one decoder, for event lines and state files alike; StateFileError (a ValueError) for a
        document that is not what the supervisor writes."""
        d = as_object(raw, "a task record")
        state = take(d, "state", str)
        if state not in TASK_STATES:
            raise StateFileError(f"unknown task state {state!r}")
        t = take(d, "t", NUMBER, None)
        if t is None:
            t = take(d, "updated_at", NUMBER, 0.0)  # an older supervisor's state file
        return cls(
            float(t), take(d, "host", str), take(d, "job", str), take(d, "task", int), state,
            pid=take(d, "pid", int, None), exit_code=take(d, "exit_code", int, None),
            restarts=take(d, "restarts", int, 0), signal=take(d, "signal", int, None),
            final=take(d, "final", bool, False), stopped_by=take(d, "stopped_by", str, None),
            restarts_left=take(d, "restarts_left", int, None), restart_reason=take(d, "restart_reason", str, None),
            error=take(d, "error", str, None), started_at=take(d, "started_at", NUMBER, None),
            exited_at=take(d, "exited_at", NUMBER, None), next_start=take(d, "next_start", NUMBER, None),
            history=tuple(h for h in take(d, "history", list, []) if isinstance(h, dict)),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TaskRecord):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __hash__(self) -> int:
        return hash((self.host, self.job, self.task, self.t, self.state))

    def __repr__(self) -> str:
        return f"TaskRecord({', '.join(f'{k}={getattr(self, k)!r}' for k in self.__slots__)})"
