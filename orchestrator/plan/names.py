"""A task's one name: TensorFlow's own `job:index` (`worker:1`), as TF_CONFIG's cluster spec, device
strings and the CLI's task selectors write it. `task_name` (training/run/layout.py, shared with the
cluster side, which names each task's TensorBoard run so) is the only place it is spelled; the CLI, JSON,
Prometheus labels, log prefixes, the dashboard and TensorBoard all show it.

On the hosts, file names (`logs/worker-1.log`, `state/worker-1.json`, `events/worker-1.jsonl`), the facts
file's keys and TFCLUSTER_TASK_ID use `<job>-<index>` (storage, training/run/layout.py: a colon is awkward
in file names); `name_of_stem` maps those back where the orchestrator decodes them.
"""

from __future__ import annotations

from functools import cache

from training.run import layout
from training.run.layout import file_stem, task_name

__all__ = ["file_stem", "job_and_index", "name_of_stem", "task_name"]


name_of_stem = cache(layout.name_of_stem)  # called per line of telemetry; the stems are the run's few task names


def job_and_index(name: str) -> tuple[str, int]:
    """The inverse of task_name: "worker:1" -> ("worker", 1)."""
    job, _, index = name.rpartition(":")
    return job, int(index)
