"""A running plan less one worker task, without a hosts file (the dashboard's "remove this worker"). Pure.

TensorFlow numbers a job's tasks 0..n-1 (the cluster spec is a list), so removing `worker:i` cannot leave a
gap: the highest-numbered worker takes index i where it runs (one task restarts, as a moved worker does in
orchestrator.plan.resize_diff), and the last index goes; removing the highest-numbered worker restarts
nobody. A host left with no task leaves the plan. A task's command does not depend on its index (the user's
`command` reads its placeholders from TFCLUSTER_ARG_* variables: orchestrator.plan.build), so what changes
with the index is its TF_CONFIG, device, TFCLUSTER_TASK and `{task}` variable; the cluster spec and every
task's TF_CONFIG and host lists are then derived again (orchestrator.plan.repin); the run's ports are kept
or given afresh by plan_resize as for any resize.
"""

from __future__ import annotations

import dataclasses

from orchestrator.config.command import arg_env_name
from orchestrator.plan.model import ClusterPlan, TaskPlan
from orchestrator.plan.repin import with_ports
from orchestrator.plan.resize_diff import ResizeRefused


def removable(plan: ClusterPlan, name: str) -> bool:
    """A worker that is not the chief (the only tasks a resize may remove)."""
    return any(t.name == name and t.job == "worker" and not t.is_chief for t in plan.tasks)


def plan_without(plan: ClusterPlan, name: str) -> ClusterPlan:
    """`plan` less worker task `name` (`worker:1`), or ResizeRefused (one line) when it is not a removable one."""
    if not removable(plan, name):
        what = "not a task of the run" if name not in {t.name for t in plan.tasks} else "not a worker that may go"
        raise ResizeRefused(f"{name}: {what} (only workers other than the chief can be removed)")
    gone = next(t for t in plan.tasks if t.name == name)
    last = max((t for t in plan.tasks if t.job == "worker"), key=lambda t: t.index)
    tasks = [_reindexed(t, gone.index) if t is last and t is not gone else t for t in plan.tasks if t is not gone]
    names_on = {h.name: tuple(t.name for t in tasks if t.host == h.name) for h in plan.hosts}
    hosts = tuple(dataclasses.replace(h, tasks=names_on[h.name]) for h in plan.hosts if names_on[h.name])
    return with_ports(dataclasses.replace(plan, tasks=tuple(tasks), hosts=hosts), {}, {})


def _reindexed(t: TaskPlan, index: int) -> TaskPlan:
    """Worker `t` as task `index` where it runs (its port and spec entry follow in with_ports)."""
    env = {**t.env, "TFCLUSTER_TASK": str(index)}
    if arg_env_name("task") in env:
        env[arg_env_name("task")] = str(index)
    device = t.device.replace(f"/task:{t.index}/", f"/task:{index}/", 1)
    tf_config = {**t.tf_config, "task": {"type": t.job, "index": index}}
    return dataclasses.replace(t, index=index, device=device, tf_config=tf_config, env=env)
