"""Which tasks the serving tasks wait for (stdlib only: the supervisor needs it without TensorFlow).

A *finisher* is a task whose end of training the `ps` (and in-graph `worker`) tasks wait for on their
done queues (training/ps.py): every between-graph worker and the chief; in in-graph mode the single
client (`chief:0`).
"""

from __future__ import annotations

FINISHER_JOBS = {"between-graph": ("chief", "worker"), "in-graph": ("chief",)}


def is_finisher(mode: str, job: str) -> bool:
    return job in FINISHER_JOBS.get(mode, ())


# Which jobs' built-in programs write progress events (the rest only serve). In parameter-server-strategy
# the coordinator (chief) writes them for the workers too: steps are counted where they are scheduled.
PROGRESS_JOBS = {"between-graph": ("chief", "worker"), "in-graph": ("chief",),
                 "multi-worker-mirrored": ("chief", "worker"), "parameter-server-strategy": ("chief", "worker")}


def reports_progress(mode: str, job: str) -> bool:
    return job in PROGRESS_JOBS.get(mode, ())
