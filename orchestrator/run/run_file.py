"""What each host gets as its run.json: `{"run_id", "created", "supervisor", "plan"}` (training/run/layout.py),
where the plan is ClusterPlan.to_json() except that only that host's own tasks are given in full.

Why: a task's `tf_config` and its `TF_CONFIG` variable list the whole cluster, and a user's command may
too ({ps_hosts}, {worker_hosts}), so the full plan grows as hosts^2 (10 MB at 256 hosts, 166 MB at
1024): sent to every host, that is what a start would spend its time on. Every other task is given
without those three fields (`tf_config`, `env`, `command`): its job, index, host, address, port, GPU and
device are all the cluster side reads of another task (the agent: ports; the in-graph client: the
workers' devices), and its own host has it in full. Each host's file is assembled from pieces encoded
once per start, so building one costs a string join, not an encoding of the plan.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from orchestrator.plan.model import ClusterPlan, TaskPlan

OWN_HOST_ONLY = ("tf_config", "env", "command")
_TASKS = '"@tfcluster-tasks@"'


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


class RunFiles:
    def __init__(self, run_data: dict[str, Any], plan: ClusterPlan, plan_json: dict[str, Any] | None = None) -> None:
        """`plan_json`: plan.to_json(compact=True) when the caller has it already (the run record's)."""
        plan_json = {**(plan_json or plan.to_json(compact=True)), "tasks": "@tfcluster-tasks@"}
        self._prefix, self._suffix = _dumps({**run_data, "plan": plan_json}).split(_TASKS)
        kept = [f.name for f in fields(TaskPlan) if f.name not in OWN_HOST_ONLY]
        self._spec = plan.cluster_spec
        self._spec_json = _dumps(plan.cluster_spec)
        self._tasks = plan.tasks
        self._slim = [_dumps({name: getattr(t, name) for name in kept}) for t in plan.tasks]
        self._by_host: dict[str, list[int]] = {}
        for i, t in enumerate(plan.tasks):
            self._by_host.setdefault(t.host, []).append(i)

    def for_host(self, host: str) -> bytes:
        tasks = list(self._slim)
        for i in self._by_host.get(host, ()):
            tasks[i] = self._full(i)
        return f"{self._prefix}[{','.join(tasks)}]{self._suffix}".encode()

    def _full(self, i: int) -> str:
        """Task i with every field: its slim JSON plus the three own-host fields, the cluster spec spliced
        in already encoded (it is most of the bytes)."""
        t = self._tasks[i]
        if t.tf_config.get("cluster") is self._spec and t.tf_config.get("task") == {"type": t.job, "index": t.index}:
            tf_config = f'{{"cluster":{self._spec_json},"task":{_dumps(t.tf_config["task"])}}}'
        else:
            tf_config = _dumps(t.tf_config)
        return f'{self._slim[i][:-1]},"tf_config":{tf_config},"command":{_dumps(t.command)},"env":{_dumps(t.env)}}}'

