"""Which tasks the serving tasks wait for (stdlib only: the supervisor needs it without TensorFlow).

A *finisher* is a task whose end of training the serving tasks wait for on their done queues
(training/cluster/ps.py): every between-graph worker and the chief; in in-graph mode the single client
(`chief:0`); in parameter-server-strategy mode the coordinator (`chief:0`). Multi-worker-mirrored mode
has no serving task: every task trains and ends by itself.

The *serving* jobs (SERVING_JOBS) run only a TF server until their finishers are done: `ps` in
between-graph mode; `ps` and `worker` in in-graph and parameter-server-strategy modes.

A synchronous between-graph update aggregates `sync_aggregate` replicas' gradients: the trainer sizes its
SyncReplicasOptimizer with it, and `tfcluster resize` says it for the resized plan (one rule, both sides).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MIRRORED = "multi-worker-mirrored"
PS_STRATEGY = "parameter-server-strategy"
FINISHER_JOBS: dict[str, tuple[str, ...]] = {
    "between-graph": ("chief", "worker"), "in-graph": ("chief",), PS_STRATEGY: ("chief",), MIRRORED: (),
}
SERVING_JOBS: dict[str, tuple[str, ...]] = {
    "between-graph": ("ps",), "in-graph": ("ps", "worker"), PS_STRATEGY: ("ps", "worker"), MIRRORED: (),
}


# Which jobs' built-in programs write progress events (the rest only serve). In parameter-server-strategy
# the coordinator (chief) writes them for the workers too: steps are counted where they are scheduled.
PROGRESS_JOBS = {"between-graph": ("chief", "worker"), "in-graph": ("chief",),
                 MIRRORED: ("chief", "worker"), PS_STRATEGY: ("chief", "worker")}


def reports_progress(mode: str, job: str) -> bool:
    return job in PROGRESS_JOBS.get(mode, ())


def sync_aggregate(training: Mapping[str, Any], trainers: int) -> int:
    """replicas_to_aggregate: `[training] replicas_to_aggregate`, else every training task (the chief and
    the workers, `trainers`) but the backup workers; it follows the plan's worker count."""
    fixed = training.get("replicas_to_aggregate")
    return int(fixed) if fixed else max(1, trainers - int(training.get("backup_workers") or 0))
