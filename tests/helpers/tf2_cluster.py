"""Plans for the TF2 strategy modes (multi-worker-mirrored, parameter-server-strategy), for LocalCluster.

The orchestrator's config does not know these modes yet (the lead integrates them there), so this builds
the ClusterPlan with the orchestrator's own dataclasses, by the rules the issue gives: tasks numbered per
job, jobs in TF_CONFIG order (chief, ps, worker), one port per task unique across the cluster, every task
with TF_CONFIG and the TFCLUSTER_* environment exactly as orchestrator/plan.py writes them, CPU workers.
- multi-worker-mirrored: `workers` worker tasks (+ a `chief` task with `chief=True`), no ps; the chief (else
  worker 0) is_chief;
- parameter-server-strategy: `ps` ps tasks, `workers` worker tasks and the `chief` coordinator.
Everything then runs through tests/helpers/local_cluster.py's LocalCluster, as the supervisor would run it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from orchestrator.config import SSHOptions, TrainingSection
from orchestrator.plan import ClusterPlan, HostPlan, TaskPlan
from tests.helpers.ports import free_port_block

MIRRORED = "multi-worker-mirrored"
PS_STRATEGY = "parameter-server-strategy"


def tf2_plan(mode: str, *, workers: int = 2, ps: int = 0, chief: bool = False,
             training: Mapping[str, Any] | None = None, python: str = sys.executable) -> ClusterPlan:
    if mode == PS_STRATEGY:
        chief = True  # the coordinator
        ps = max(ps, 1)
    counts = {"chief": 1 if chief else 0, "ps": ps, "worker": workers}
    base = free_port_block(sum(counts.values()))
    ports: dict[tuple[str, int], int] = {}
    for job in ("chief", "ps", "worker"):
        for i in range(counts[job]):
            ports[(job, i)] = base + len(ports)
    spec = {job: [f"127.0.0.1:{ports[(job, i)]}" for i in range(n)] for job, n in counts.items() if n}
    host_of = {"chief": "boss", "ps": "ps", "worker": "wk"}
    tasks = []
    for (job, i), port in ports.items():
        host = f"{host_of[job]}{i}" if job == "ps" else host_of[job]
        tf_config = {"cluster": spec, "task": {"type": job, "index": i}}
        env = {
            "TF_CONFIG": json.dumps(tf_config, separators=(",", ":")), "CUDA_VISIBLE_DEVICES": "",
            "TFCLUSTER_JOB": job, "TFCLUSTER_TASK": str(i), "TFCLUSTER_HOST": host, "TFCLUSTER_MODE": mode,
            "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "1",
        }
        tasks.append(TaskPlan(
            job=job, index=i, host=host, address="127.0.0.1", port=port, gpu=None,
            device=f"/job:{job}/task:{i}/device:CPU:0", cuda_visible_devices="", tf_config=tf_config,
            command=[python, "-m", "training.task"], env=env,
            is_chief=job == "chief" or (job == "worker" and i == 0 and not chief),
        ))
    hosts = tuple(
        HostPlan(name=name, address="127.0.0.1", transport="local", python=python, workdir="~/.tfcluster",
                 ssh=SSHOptions(), roles=tuple(sorted({t.job for t in tasks if t.host == name})),
                 tasks=tuple(t.name for t in tasks if t.host == name))
        for name in dict.fromkeys(t.host for t in tasks)
    )
    return ClusterPlan(cluster_name="itest", mode=mode, cluster_spec=spec, hosts=hosts, tasks=tuple(tasks),
                       training=TrainingSection.model_validate(dict(training or {})).model_dump(),
                       uses_user_command=False)
