"""A plan with other ports (`start --auto-ports`): the same plan, every port replaced. Pure.

A port is in several places of a plan: each task's `port`, the cluster spec (and so every task's
`tf_config` and its `TF_CONFIG` variable), the user command's `{ps_hosts}`/`{worker_hosts}`/`{chief_host}`
values (TFCLUSTER_ARG_* variables, only where the command uses them) and each host's `control_port`.
All are derived again here from the new ports, as orchestrator.plan.build derives them, never patched
as text.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

from orchestrator.config.command import arg_env_name
from orchestrator.plan.model import JOB_ORDER, ClusterPlan, TaskPlan

_HOST_LISTS = {"ps_hosts": "ps", "worker_hosts": "worker", "chief_host": "chief"}


def with_ports(plan: ClusterPlan, task_ports: Mapping[str, int], control_ports: Mapping[str, int]) -> ClusterPlan:
    """`task_ports`: task name (`worker-1`) -> port; `control_ports`: host name -> its supervisor's port.
    A task or host missing from them keeps its port."""
    ports = {t.name: task_ports.get(t.name, t.port) for t in plan.tasks}
    spec: dict[str, list[str]] = {}
    for job in JOB_ORDER:
        members = sorted((t for t in plan.tasks if t.job == job), key=lambda t: t.index)
        if members:
            spec[job] = [f"{t.address}:{ports[t.name]}" for t in members]
    tasks = tuple(_task(t, ports[t.name], spec) for t in plan.tasks)
    hosts = tuple(dataclasses.replace(h, control_port=control_ports.get(h.name, h.control_port)) for h in plan.hosts)
    return dataclasses.replace(plan, cluster_spec=spec, tasks=tasks, hosts=hosts)


def _task(t: TaskPlan, port: int, spec: dict[str, list[str]]) -> TaskPlan:
    tf_config = {**t.tf_config, "cluster": spec}
    env = dict(t.env)
    if "TF_CONFIG" in env:
        env["TF_CONFIG"] = json.dumps(tf_config, separators=(",", ":"))
    for placeholder, job in _HOST_LISTS.items():
        if arg_env_name(placeholder) in env:
            env[arg_env_name(placeholder)] = ",".join(spec.get(job, []))
    return dataclasses.replace(t, port=port, tf_config=tf_config, env=env)
