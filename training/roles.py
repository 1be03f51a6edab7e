"""Which tasks the serving tasks wait for (stdlib only: the supervisor needs it without TensorFlow).

A *finisher* is a task whose end of training the `ps` (and in-graph `worker`) tasks wait for on their
done queues (training/ps.py): every between-graph worker and the chief; in in-graph mode the single
client (`chief:0`).
"""

from __future__ import annotations

FINISHER_JOBS = {"between-graph": ("chief", "worker"), "in-graph": ("chief",)}
# Set (to "1") by the supervisor on the stand-in of a finisher that failed for good (training/stand_in.py).
STAND_IN_ENV = "TFCLUSTER_STAND_IN"


def is_finisher(mode: str, job: str) -> bool:
    return job in FINISHER_JOBS.get(mode, ())
