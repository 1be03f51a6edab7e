"""A real local TensorFlow cluster (testkit/local_cluster.py) whose tasks a test starts in its own order.

`cluster_holding_back(plan, run_dir, "chief-0")` prepares the run dir and starts every task but those named
(by file stem, as their logs are named): the test starts them itself (`cluster.start_task`) once what they
must find has happened, e.g. the chief only when every worker has built its graph and waits for the chief's
initialisation, so that all of them train from the first steps on. Every process is killed at the end, as
`running_cluster` does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from orchestrator.plan.model import ClusterPlan
from testkit.local_cluster import LocalCluster
from training.run.layout import file_stem


@contextlib.contextmanager
def cluster_holding_back(plan: ClusterPlan, run_dir: Path, *held: str) -> Iterator[LocalCluster]:
    unknown = set(held) - {file_stem(t.job, t.index) for t in plan.tasks}
    assert not unknown, f"no such task in the plan: {sorted(unknown)}"
    cluster = LocalCluster(plan, run_dir)
    try:
        cluster.prepare()
        for task in plan.tasks:
            if file_stem(task.job, task.index) not in held:
                cluster.start_task(task)
        yield cluster
    finally:
        cluster.stop()
