"""A task's one name: TensorFlow's own `job:index` (`worker:1`), as TF_CONFIG's cluster spec, device
strings and the CLI's task selectors write it. `task_name` is the only place it is spelled; the CLI,
JSON, Prometheus labels, log prefixes and the dashboard all show it.

On the hosts, file names (`logs/worker-1.log`, `state/worker-1.json`, `events/worker-1.jsonl`), the facts
file's keys and TFCLUSTER_TASK_ID use `<job>-<index>` (storage, training/run/layout.py: a colon is awkward
in file names); `name_of_stem` maps those back where the orchestrator decodes them.
"""

from __future__ import annotations

from functools import cache


def task_name(job: str, index: int) -> str:
    return f"{job}:{index}"


def file_stem(job: str, index: int) -> str:
    """How the hosts spell a task (training/run/layout.py's file names): "worker-1"."""
    return f"{job}-{index}"


@cache  # called per line of telemetry; the stems are the run's few task names
def name_of_stem(stem: str) -> str:
    """"worker-1" -> "worker:1" (anything else is returned as it is)."""
    job, sep, index = stem.rpartition("-")
    return task_name(job, int(index)) if sep and index.isdigit() else stem


def job_and_index(name: str) -> tuple[str, int]:
    """The inverse of task_name: "worker:1" -> ("worker", 1)."""
    job, _, index = name.rpartition(":")
    return job, int(index)
