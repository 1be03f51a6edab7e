"""The rules the supervisors apply to the whole run: restart budgets, the success policy, group restarts.

- Restart budget (like Kubernetes' back-off): a task may be restarted `max_restarts` times; after
  `restart_window` seconds of healthy running its count starts again from zero, so rare crashes spread
  over days never fail a run.
- Success (Kubeflow TFJob's success policy): the run has *finished* when the tasks it waits for exited
  0 — `success = "chief"`: the chief (worker 0 without a chief job); `"all-workers"`: every worker and
  the chief. In in-graph and parameter-server-strategy mode only the client/coordinator trains, so the
  chief is all it waits for. It has *failed* as soon as one task failed for good (not stopped by the
  user, not ended by the run). Tasks the policy does not wait for (ps, serving workers) are then
  stopped cleanly everywhere.
- Group restart (multi-worker-mirrored): a dead worker stalls every other at the next collective, so
  the group (every chief and worker task) restarts together from the last checkpoint, like torchrun.
Each supervisor evaluates these on what its peers told it (training/supervisor/peers.py), so every host
reaches the same verdict. Stdlib only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

CLIENT_CHIEF_MODES = ("in-graph", "parameter-server-strategy")
GROUP_RESTART_MODES = ("multi-worker-mirrored",)
GROUP_JOBS = ("chief", "worker")


class RestartBudget:
    """`max_restarts` restarts, given back after `window` seconds of healthy running."""

    __slots__ = ("max_restarts", "used", "window")

    def __init__(self, max_restarts: int, window: float) -> None:
        self.max_restarts = max_restarts
        self.window = window
        self.used = 0

    def ran_for(self, seconds: float) -> None:
        """The task's last attempt ran this long before it exited: a healthy stretch resets the count."""
        if seconds >= self.window:
            self.used = 0

    def take(self) -> bool:
        """Use one restart; False when none is left."""
        if self.used >= self.max_restarts:
            return False
        self.used += 1
        return True

    @property
    def left(self) -> int:
        return max(self.max_restarts - self.used, 0)


def waited_for(plan: dict[str, Any]) -> set[str]:
    """The task names whose exit 0 makes the run a success."""
    tasks = plan.get("tasks", [])
    chief = next((f"{t['job']}-{t['index']}" for t in tasks if t.get("is_chief")), None)
    mode = plan.get("mode", "between-graph")
    policy = (plan.get("training") or {}).get("success", "chief")
    if policy == "all-workers" and mode not in CLIENT_CHIEF_MODES:
        return {f"{t['job']}-{t['index']}" for t in tasks if t["job"] in GROUP_JOBS}
    return {chief} if chief else set()


def outcome(plan: dict[str, Any], finals: dict[str, dict[str, Any]]) -> str | None:
    """"finished", "failed", "stopped" (a waited-for task was stopped by the user) or None (not yet),
    from the final exits known so far: {task name: {"code": int|None, "stopped_by": None|"user"|...}}."""
    for final in finals.values():
        if final.get("stopped_by") is None and final.get("code") != 0:
            return "failed"
    wanted = waited_for(plan)
    if not wanted or not wanted <= finals.keys():
        return None
    if all(finals[name].get("code") == 0 and finals[name].get("stopped_by") is None for name in wanted):
        return "finished"
    return "stopped"


def restarts_as_group(mode: str, job: str) -> bool:
    return mode in GROUP_RESTART_MODES and job in GROUP_JOBS
