"""`tfcluster resize`: what a new plan changes in a running run's plan, or why it cannot. Pure.

Only workers may change (issue 37): a worker added, removed, or moved (its `worker:i` now on another host
or other GPUs: that task restarts as the new one). Everything else must be as the run has it, or the
resize is refused with one line naming the key or the host: the mode, the cluster's name, the
`[training]` section, `[cluster] base_port`, every ps and chief task (and the chief worker), and each
kept host's own settings (address, transport, python, workdir, ssh, login shell).

Ports: the plan builder numbers every port consecutively from `base_port`, so one worker more shifts the
ports of the tasks after it and every host's control port. A running task cannot change its port, so
the resized plan keeps every kept task's and kept host's port, and gives each new task and new host a
port above every port of either plan (a moved worker too; orchestrator.plan.repin derives the cluster spec, TF_CONFIG and
the command's host lists again from them).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from orchestrator.errors import UsageError
from orchestrator.plan.model import ClusterPlan, HostPlan, TaskPlan
from orchestrator.plan.repin import with_ports

# The settings of a host a running supervisor, its transport or its tasks were started with.
HOST_KEYS = ("address", "transport", "python", "workdir", "ssh", "login_shell", "dial_address")
# What a task's environment takes from the cluster's shape: it changes with every resize.
SHAPE_ENV = ("TF_CONFIG", "TFCLUSTER_ARG_PS_HOSTS", "TFCLUSTER_ARG_WORKER_HOSTS", "TFCLUSTER_ARG_CHIEF_HOST")


class ResizeRefused(UsageError):
    """The new plan changes more than the workers: one line naming what, exit 2, nothing changed."""


@dataclass(frozen=True)
class Resize:
    """The change from `old` to `new` (the new plan with the run's ports kept)."""

    old: ClusterPlan
    new: ClusterPlan
    added: tuple[str, ...]  # worker tasks that start ("worker:2")
    removed: tuple[str, ...]  # worker tasks that end for good
    moved: tuple[str, ...]  # worker tasks whose host or GPUs change: ended there, started anew
    hosts_added: tuple[str, ...]
    hosts_removed: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.moved or self.hosts_added or self.hosts_removed)

    @property
    def staying(self) -> list[TaskPlan]:
        """The new plan's tasks that stay where they ran (neither removed nor moved, nor added)."""
        old = {t.name for t in self.old.tasks} - {*self.removed, *self.moved}
        return [t for t in self.new.tasks if t.name in old]

    @property
    def hosts_changed(self) -> tuple[str, ...]:
        """Kept hosts whose own tasks change (they take on or drop a task)."""
        names = {*self.added, *self.removed, *self.moved}
        touched = {t.host for p in (self.old, self.new) for t in p.tasks if t.name in names}
        kept = {h.name for h in self.new.hosts} - set(self.hosts_added)
        return tuple(h.name for h in self.new.hosts if h.name in touched & kept)

    def lines(self) -> list[str]:
        """What the resize does, a line each, as `--dry-run` prints it."""
        old_host = {t.name: t.host for t in self.old.tasks}
        new_host = {t.name: t.host for t in self.new.tasks}
        out = [f"host {h} joins" for h in self.hosts_added]
        out += [f"{n} starts on {new_host[n]}" for n in self.added]
        out += [f"{n} moves {old_host[n]} -> {new_host[n]} (restarted there)" for n in self.moved]
        out += [f"{n} on {old_host[n]} is stopped" for n in self.removed]
        out += [f"host {h} leaves" for h in self.hosts_removed]
        return out

    def summary(self) -> dict[str, list[str]]:
        """The run record's history entry's `what` (records.ResizeEntry)."""
        return {"added": list(self.added), "removed": list(self.removed), "moved": list(self.moved),
                "hosts_added": list(self.hosts_added), "hosts_removed": list(self.hosts_removed)}


def plan_resize(old: ClusterPlan, new: ClusterPlan) -> Resize:
    """The resize from the run's plan `old` to `new` (built from the edited hosts file), or ResizeRefused."""
    _same_run_settings(old, new)
    old_hosts = {h.name: h for h in old.hosts}
    for h in new.hosts:
        if h.name in old_hosts:
            _same_host(old_hosts[h.name], h)
    old_tasks = {t.name: t for t in old.tasks}
    new_tasks = {t.name: t for t in new.tasks}
    for t in old.tasks:
        if t.job != "worker" or t.is_chief:
            _same_task(t, new_tasks.get(t.name))
    for t in new.tasks:
        if t.name not in old_tasks and (t.job != "worker" or t.is_chief):
            raise ResizeRefused(f"{_role(t)} {t.name} on {t.host} would be added: only workers may change")
    kept_workers = [n for n, t in new_tasks.items() if t.job == "worker" and n in old_tasks]
    moved = tuple(n for n in kept_workers if _placed(old_tasks[n]) != _placed(new_tasks[n]))
    for n in kept_workers:  # one that stays where it runs must stay as it runs
        if n not in moved and (_own_env(old_tasks[n]) != _own_env(new_tasks[n])
                               or old_tasks[n].command != new_tasks[n].command):
            raise ResizeRefused(f"{n} on {old_tasks[n].host}: its environment or command would change "
                                "(hosts.<name>.env?): a resize adds, removes or moves workers only")
    return Resize(
        old=old, new=_keep_ports(old, new, set(moved)),
        added=tuple(n for n, t in new_tasks.items() if t.job == "worker" and n not in old_tasks),
        removed=tuple(n for n, t in old_tasks.items() if t.job == "worker" and n not in new_tasks),
        moved=moved,
        hosts_added=tuple(h.name for h in new.hosts if h.name not in old_hosts),
        hosts_removed=tuple(h.name for h in old.hosts if h.name not in {x.name for x in new.hosts}),
    )


def _same_run_settings(old: ClusterPlan, new: ClusterPlan) -> None:
    if old.mode != new.mode:
        raise ResizeRefused(f"cluster.mode: {old.mode} -> {new.mode}: a resize changes workers only")
    if old.cluster_name != new.cluster_name:
        raise ResizeRefused(f"cluster.name: {old.cluster_name!r} -> {new.cluster_name!r}: a resize changes "
                            "workers only")
    before, after = old.training.model_dump(), new.training.model_dump()
    for key in sorted(before.keys() | after.keys()):
        if before.get(key) != after.get(key):
            raise ResizeRefused(f"training.{key}: changed ({before.get(key)!r} -> {after.get(key)!r}): a resize "
                                "changes workers only")
    if old.tasks and new.tasks and _base_port(old) != _base_port(new):
        raise ResizeRefused(f"cluster.base_port: {_base_port(old)} -> {_base_port(new)}: a resize keeps the "
                            "run's ports")


def _base_port(plan: ClusterPlan) -> int:
    """The first port the builder numbered (orchestrator.plan.build: consecutive from base_port)."""
    return min([t.port for t in plan.tasks] + [h.control_port for h in plan.hosts if h.control_port])


def _role(t: TaskPlan) -> str:
    return "the chief" if t.is_chief and t.job == "worker" else t.job


def _same_task(old: TaskPlan, new: TaskPlan | None) -> None:
    """A ps, chief or the chief worker must stay as it is (its port aside: the run's is kept)."""
    if new is None:
        raise ResizeRefused(f"{_role(old)} {old.name} on {old.host} would be removed: only workers may change")
    if new.is_chief != old.is_chief:
        raise ResizeRefused(f"{old.name} on {old.host}: which task is the chief would change: only workers may "
                            "change")
    if _placed(old) != _placed(new):
        raise ResizeRefused(f"{_role(old)} {old.name} would move from {old.host} to {new.host}"
                            f"{' (other GPUs)' if old.host == new.host else ''}: only workers may change")
    if _own_env(old) != _own_env(new) or old.command != new.command:
        raise ResizeRefused(f"{_role(old)} {old.name} on {old.host}: its environment or command would change "
                            "(hosts.<name>.env?): only workers may change")


def _same_host(old: HostPlan, new: HostPlan) -> None:
    for key in HOST_KEYS:
        if getattr(old, key) != getattr(new, key):
            raise ResizeRefused(f"hosts.{old.name}.{key}: changed: a running host keeps its settings "
                                "(remove it in one resize, add it back in another)")


def _placed(t: TaskPlan) -> tuple[str, tuple[int, ...]]:
    return t.host, t.gpus


def _own_env(t: TaskPlan) -> dict[str, str]:
    return {k: v for k, v in t.env.items() if k not in SHAPE_ENV}


def _keep_ports(old: ClusterPlan, new: ClusterPlan, moved: set[str]) -> ClusterPlan:
    """`new` with every kept task's and host's port as `old` has it, fresh ones above both for the rest (a
    moved task too: its new process may start while the old one still holds the old port)."""
    old_task_ports = {t.name: t.port for t in old.tasks if t.name not in moved}
    old_control = {h.name: h.control_port for h in old.hosts}
    used = [*old_task_ports.values(), *old_control.values(), *(t.port for t in new.tasks),
            *(h.control_port for h in new.hosts)]
    fresh = itertools.count(max(used, default=0) + 1)
    task_ports = {t.name: old_task_ports[t.name] if t.name in old_task_ports else next(fresh) for t in new.tasks}
    control = {h.name: old_control[h.name] if h.name in old_control else (next(fresh) if h.control_port else 0)
               for h in new.hosts}
    ported = with_ports(new, task_ports, control)
    return dataclasses.replace(ported, warnings=new.warnings)
