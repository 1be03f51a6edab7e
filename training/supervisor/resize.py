"""A running supervisor takes on and drops tasks: `tfcluster resize` (orchestrator/run/resize.py).

The orchestrator replaces this host's run.json (atomically, 0600) with one holding the resized plan and
`"resize": {"serial": n, "restart": [task stems]}`. The supervisor looks at run.json's inode and mtime once
a second (`RunFileWatch`: one stat, no signal to deliver, nothing to miss while it is busy) and, when
the serial is above the one it applied, reconciles its tasks with the plan's tasks for this host:
- a task no longer planned here ends (TERM to its processes, the supervisor's grace, KILL) and leaves
  the host's record: its state and events files are renamed `*.resized` (no reader globs them: its row
  goes from `status` and the dashboard, not `lost`); its log stays. Its exit is no news for the policy
  or the peers: the run did not lose it, the user removed it;
- a task planned here that it does not run, or one named in `restart`, is started from the new plan
  (TF_CONFIG with the new cluster), but for a group member a group restart here already restarted with
  that plan (a mirrored resize's second serial: `_regrouped`), which is not restarted twice;
- every other task runs on untouched; its command and environment are the new plan's from its next
  start (a restart by policy picks up the new cluster);
- the peers and the success policy follow the new plan (run_view.RunView.replan); the facts writer, the
  log cap and the progress tailers follow the new task list;
- the group-restart epoch (multi-worker-mirrored) becomes the serial on every host, a launched one too
  (core.Supervisor starts at run.json's serial): the group restarts the resize caused on a peer that had
  not applied it yet are announced with a lower epoch, and do not restart the new group.
It then writes its state with `resize_serial = n`: the orchestrator's acknowledgement. Stdlib only.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import TYPE_CHECKING

from ..run.file_stamp import file_stamp
from ..telemetry.host_facts import FactsWriter
from ..telemetry.traffic import TaskTraffic
from .ending import kill_leftovers, term_wait_kill
from .log_cap import LogCap
from .policy import restarts_as_group
from .procfs import run_processes

if TYPE_CHECKING:
    from typing import Any

    from .children import Task
    from .core import Supervisor

RESIZED_SUFFIX = ".resized"  # a removed task's state and events files: kept, read by nobody


def resize_serial(run: dict[str, Any]) -> int:
    resize = run.get("resize")
    serial = resize.get("serial") if isinstance(resize, dict) else 0
    return serial if isinstance(serial, int) and not isinstance(serial, bool) else 0


class RunFileWatch:
    """Whether run.json was replaced since the last look; `serial`: the resize this supervisor applied."""

    def __init__(self, path: str, run: dict[str, Any]) -> None:
        self.path = path
        self.serial = resize_serial(run)
        self._stamp = file_stamp(self.path)

    def changed(self) -> bool:
        stamp = file_stamp(self.path)
        if stamp is None or stamp == self._stamp:
            return False
        self._stamp = stamp
        return True


def apply_resize(sup: Supervisor, facts: FactsWriter, tailers: list[Any]) -> tuple[FactsWriter, list[Any]]:
    """Reconcile `sup`'s tasks with run.json's plan (above); returns the facts writer and tailers to use."""
    try:
        with open(sup.layout.run_file, encoding="utf-8") as f:
            run = json.load(f)
    except (OSError, ValueError):
        return facts, tailers  # being replaced, or damaged: the next look sees the whole file
    serial = resize_serial(run)
    if serial <= sup.resize.serial:
        return facts, tailers
    plan = run["plan"]
    planned = {f"{t['job']}-{t['index']}": t for t in plan["tasks"] if t["host"] == sup.host}
    current = {t.name: t for t in sup.tasks}
    restart = set(run["resize"].get("restart", ())) - _regrouped(sup, serial, planned, current)
    dropped = [t for name, t in current.items() if name not in planned]
    again = [t for name, t in current.items() if name in planned and name in restart]
    _end(sup, dropped, "removed from the run by `tfcluster resize`")
    _end(sup, again, "restarted by `tfcluster resize` with the new cluster")
    for task in dropped:
        _retire_files(sup, task)
    sup.run = run
    sup.view.replan(run)
    # A new group epoch, the same on every host (the serial; a host the resize launched starts at it): a group
    # restart a peer announces because its old task lost the group this resize ended is older, and ignored.
    sup.epoch = max(sup.epoch, serial)
    tasks, fresh = [], []
    for name, t in planned.items():
        running = current.get(name)
        if running is None or name in restart:
            task = sup.new_task(t)
            if running is not None:  # restarted: its count and exits go on (and its next attempt's marker is new)
                task.restarts, task.history = running.restarts + 1, running.history
            fresh.append(task)
            tasks.append(task)
        else:  # runs on; its next start is the new plan's
            running.command, running.env = list(t["command"]), dict(t["env"])
            running.epoch = sup.epoch  # a member of the group as it is now: its failure restarts the group
            tasks.append(running)
    sup.tasks = tasks
    max_log_mb = float((plan.get("training") or {}).get("max_log_mb", 1024.0))
    sup.log_cap = LogCap([sup.layout.log_file(t.job, t.index) for t in tasks], max_log_mb)
    for task in fresh:
        sup._spawn(task)
    sup.resize.serial = serial
    sup._write_self()
    # The GPU sampler (a thread) goes on; the traffic's ports may have changed: a new one, the old closed.
    if facts.traffic is not None:
        facts.traffic.close()
    facts = FactsWriter(sup.layout, sup.host, {t.name: t.port for t in tasks}, gpus=facts.gpus, find_gpus=False,
                        traffic=TaskTraffic.for_plan(plan, sup.host))
    return facts, _tailers(sup, plan, tailers, {t.name for t in tasks})


def _regrouped(sup: Supervisor, serial: int, planned: dict[str, Any], current: dict[str, Task]) -> set[str]:
    """Group members a resize need not restart: a group restart here since the resize's first serial
    (orchestrator/run/resize.py, `_kept_then_new`: the epoch is at or past this serial) restarted them, with
    the command the resize gives them (the first serial's plan). Restarting them again would cost the group
    a second restart for one resize."""
    if sup.epoch < serial:
        return set()
    return {name for name, task in current.items() if name in planned and restarts_as_group(sup.mode, task.job)
            and task.command == list(planned[name]["command"]) and task.env == dict(planned[name]["env"])}


def _end(sup: Supervisor, tasks: list[Task], why: str) -> None:
    """TERM every process of these tasks (a `sh -c` command's program too), the grace, then KILL."""
    running = [t for t in tasks if t.proc is not None and t.proc.poll() is None]
    for task in tasks:
        sup._note(task, f"{task.label} {why}")
    attempts = {f"{t.name}#{t.restarts}" for t in running}
    marked = [p["pid"] for p in run_processes(sup.layout.root) if p["task"] in attempts]
    term_wait_kill([t.proc for t in running if t.proc is not None], sup.grace, also=marked)
    for task in running:
        kill_leftovers(sup.layout.root, f"{task.name}#{task.restarts}")  # a program its `sh -c` left behind
        assert task.proc is not None
        task.proc.wait()


def _retire_files(sup: Supervisor, task: Task) -> None:
    for path in (sup.layout.task_state_file(task.job, task.index), sup.layout.events_file(task.job, task.index)):
        with contextlib.suppress(OSError):
            os.replace(path, path + RESIZED_SUFFIX)


def _tailers(sup: Supervisor, plan: dict[str, Any], tailers: list[Any], names: set[str]) -> list[Any]:
    """The user program's progress tailers for the new task list: kept ones go on where they were."""
    if plan.get("uses_user_command") is not True:
        return tailers
    from ..progress.tailer import close_tailers, log_progress_tailers

    close_tailers([t for t in tailers if t.name not in names])
    kept = [t for t in tailers if t.name in names]
    have = {t.name for t in kept}
    return kept + [t for t in log_progress_tailers(sup.layout, sup.host, plan) if t.name not in have]
