"""Plans for the TF2 strategy modes (multi-worker-mirrored, parameter-server-strategy), for LocalCluster,
built by the orchestrator's own planner from a Config of local "hosts":
- multi-worker-mirrored: `workers` worker tasks on host `wk` (+ a `chief` task on host `boss` with
  `chief=True`), no ps; the chief (else worker 0) is_chief;
- parameter-server-strategy: `ps` ps tasks (hosts ps0, ps1, ...), `workers` worker tasks on `wk` and the
  `chief` coordinator on `boss`.
Everything then runs through testkit/local_cluster.py's LocalCluster, as the supervisor would run it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from orchestrator.config.schema import Config
from orchestrator.plan.from_file import plan_config
from orchestrator.plan.model import ClusterPlan
from orchestrator.run.local_ports import free_port_block

MIRRORED = "multi-worker-mirrored"
PS_STRATEGY = "parameter-server-strategy"


def tf2_plan(mode: str, *, workers: int = 2, ps: int = 0, chief: bool = False,
             training: Mapping[str, Any] | None = None, python: str = sys.executable) -> ClusterPlan:
    if mode == PS_STRATEGY:
        chief = True  # the coordinator
        ps = max(ps, 1)
    hosts: list[dict[str, Any]] = [{"name": "boss", "roles": ["chief"]}] if chief else []
    hosts += [{"name": f"ps{i}", "roles": ["ps"]} for i in range(ps)]
    hosts.append({"name": "wk", "roles": ["worker"], "workers": workers})
    ports = (1 if chief else 0) + ps + workers + len(hosts)  # tasks, then each host's supervisor
    return plan_config(Config.model_validate({
        "cluster": {"name": "itest", "mode": mode, "base_port": free_port_block(ports)},
        "remote": {"python": python},
        "hosts": [{**h, "address": "127.0.0.1", "transport": "local"} for h in hosts],
        "training": dict(training or {}),
    }))
