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
- Stop for good (the dashboard's `x`, training/supervisor/hold.py) is never a failure. The run goes on
  without a held task when it can, and can still end *finished*: a between-graph worker the policy
  does not wait for, a parameter-server-strategy worker, and under `all-workers` a worker while another
  it waits for is left (those finish it). It cannot go on without a task in `needed_for_the_run`: a
  ps, the chief the policy waits for (the client, the coordinator), every worker of in-graph (the
  client's graph runs there) and multi-worker-mirrored (each all-reduce needs the whole group); held,
  such a task ends the run *stopped* at once, everywhere (as `stop` would, but from the dashboard).
- No restart for what a restart cannot fix: a built-in task (training/task.py) that exits CANNOT_RUN_HERE
  (a GPU plan where TensorFlow sees fewer GPUs) ends for good at once, restart budget or not. A user's own
  program may exit 78 for reasons of its own: its exits keep the usual restarts.
- Up for `start`: a task that has run `settle` seconds, or ended for good; a built-in task the plan gives
  GPUs also once it has written that TensorFlow sees them (RunLayout.gpus_seen_file: TensorFlow takes
  seconds to import, so without this `start` would say "started" before the task fails its GPU check).
- Group restart (multi-worker-mirrored): a dead worker stalls every other at the next collective, so
  the group (every chief and worker task) restarts together from the last checkpoint, like torchrun.
Each supervisor evaluates these on what its peers told it (training/supervisor/peers.py), so every host
reaches the same verdict. Stdlib only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..telemetry.task_record import held_by_user

if TYPE_CHECKING:
    from typing import Any

CLIENT_CHIEF_MODES = ("in-graph", "parameter-server-strategy")
GROUP_RESTART_MODES = ("multi-worker-mirrored",)
GROUP_JOBS = ("chief", "worker")
CANNOT_RUN_HERE = 78  # sysexits' EX_CONFIG: a built-in task that cannot run here as planned, for good


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


def needed_for_the_run(plan: dict[str, Any]) -> set[str]:
    """The task names the run cannot go on without: stopped for good, they end it `stopped`."""
    tasks = plan.get("tasks", [])
    mode = plan.get("mode", "between-graph")
    needed = {f"{t['job']}-{t['index']}" for t in tasks if t["job"] == "ps"}
    if mode in ("in-graph", *GROUP_RESTART_MODES):
        needed |= {f"{t['job']}-{t['index']}" for t in tasks if t["job"] in GROUP_JOBS}
    waited = waited_for(plan)
    return needed | (waited if len(waited) == 1 else set())  # one task waited for: nothing finishes without it


def outcome(plan: dict[str, Any], finals: dict[str, dict[str, Any]]) -> str | None:
    """"finished", "failed", "stopped" or None (not yet), from the final exits known so far:
    {task name: {"code": int|None, "stopped_by": None|"user"|...}}. Stopped: the user stopped for good a
    task the run cannot go on without, or every task it waits for ended without one exiting 0."""
    for final in finals.values():
        if final.get("stopped_by") is None and final.get("code") != 0:
            return "failed"
    if any(held_by_user(finals.get(name, {}).get("stopped_by")) for name in needed_for_the_run(plan)):
        return "stopped"
    wanted = waited_for(plan)
    if not wanted or not wanted <= finals.keys():
        return None
    done = [name for name in wanted if finals[name].get("stopped_by") is None]  # ended by themselves
    if done and all(finals[name].get("code") == 0 for name in done) and all(
            finals[name].get("stopped_by") in (None, "user") for name in wanted):
        return "finished"  # held ones excused: the user chose to go on without them
    return "stopped"


def restart_cannot_fix(plan: dict[str, Any], code: int | None) -> bool:
    """The task's exit says a restart would meet the same: end it for good (built-in tasks only)."""
    return code == CANNOT_RUN_HERE and plan.get("uses_user_command") is not True


def waits_for_gpu_check(plan: dict[str, Any], env: dict[str, str]) -> bool:
    """A built-in task given GPUs (CUDA_VISIBLE_DEVICES not empty): up for `start` once it has seen them."""
    return plan.get("uses_user_command") is not True and bool(env.get("CUDA_VISIBLE_DEVICES", "").strip())


def restarts_as_group(mode: str, job: str) -> bool:
    return mode in GROUP_RESTART_MODES and job in GROUP_JOBS
