"""What the dashboard can do to one task, and what its confirm dialog says will happen after it.

- restart (`r`): SIGTERM; the supervisor starts the task again by the run's restart policy (a program
  that ends cleanly, exit 0, on SIGTERM is done instead: the built-in ps tasks do);
- kill (`k`): SIGKILL; restarted by the policy too;
- stop for good (`x`): the orchestrator writes the task's hold file, then SIGTERMs it; the supervisor
  never starts a held task again (DESIGN.md "Stop for good"); the dialog says whether the run goes on
  without it or ends `stopped` (training/supervisor/policy.py); on a worker of a run that can be resized
  (a `WorkerRemoval` given, orchestrator/run/remove_worker.py), `x` first offers the choice: stop it, or
  remove it from the run (a resize: tui/screens/stop_or_remove.py), whose dialog lists what the resize does.

The dialog names the policy and, under `on-failure`, how many restarts are left, so the user knows
before saying yes whether a kill is a restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from orchestrator.monitor.source import TaskActions
from orchestrator.monitor.task_state import TaskState

Verb = Literal["restart", "kill", "stop"]


@dataclass(frozen=True)
class RestartPolicy:
    """The run's `[training] restart` and `max_restarts` (from its plan), and the tasks it cannot go on
    without (training/supervisor/policy.py `needed_for_the_run`, by their `job:index` names)."""

    restart: str  # "on-failure" | "never"
    max_restarts: int
    needed: frozenset[str] = frozenset()


class WorkerRemoval(Protocol):
    """Removing a worker from a run that can be resized (orchestrator/run/remove_worker.py WorkerRemover)."""

    def can_remove(self, name: str) -> bool:
        """Cheap (no host): whether `x` on this row offers "remove from the run"."""
        ...

    def preview(self, name: str) -> list[str]:
        """What the resize would do, a line each; raises (one line) when it cannot be done."""
        ...

    def remove(self, name: str) -> str:
        """Do it (seconds: called off the UI thread); one line for the user, or raises."""
        ...


def removal_question(name: str, lines: list[str]) -> str:
    """The removal's confirm question: what the resize does (a moved worker is said to restart)."""
    return f"Remove {name} from the run (a resize)? It does: " + "; ".join(lines) + "."


def question(verb: Verb, name: str, task: TaskState | None, policy: RestartPolicy | None) -> str:
    if verb == "stop":
        text = f"Stop {name} for good (SIGTERM)? It will not be restarted; "
        if task is not None and policy is not None and task.name in policy.needed:
            return text + "the run cannot go on without it: it ends `stopped`, its other tasks stopped too."
        return text + "the run goes on without it and can still end `finished`."
    head = f"Restart {name} (SIGTERM)? " if verb == "restart" else f"Kill {name} (SIGKILL)? "
    return head + _after_exit(verb, task, policy)


def _after_exit(verb: Verb, task: TaskState | None, policy: RestartPolicy | None) -> str:
    if policy is None:
        return "The supervisor restarts it by the run's restart policy."
    if policy.restart == "never":
        return "It will not be restarted (restart = never)."
    used = task.restarts if task is not None else 0
    left = policy.max_restarts - used
    if left <= 0:
        return (f"It will not be restarted (restart = {policy.restart}, {used} of {policy.max_restarts} "
                "restarts used).")
    text = f"The supervisor will restart it (restart = {policy.restart}, {left} of {policy.max_restarts} restarts left)"
    if verb == "restart":
        text += ", unless it ends cleanly (exit 0) on SIGTERM, as the built-in ps tasks do"
    return text + "."


def perform(actions: TaskActions, verb: Verb, job: str, index: int) -> str:
    """Ask the orchestrator; returns its one-line answer for the user."""
    if verb == "restart":
        return actions.restart_task(job, index)
    if verb == "kill":
        return actions.kill_task(job, index)
    return actions.stop_task(job, index)
