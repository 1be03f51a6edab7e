"""Which tasks the serving tasks wait for (stdlib only: the supervisor needs it without TensorFlow).

A *finisher* is a task whose end of training the serving tasks wait for on their done queues
(training/cluster/ps.py): every between-graph worker and the chief; in in-graph mode the single client
(`chief:0`); in parameter-server-strategy mode the coordinator (`chief:0`). Multi-worker-mirrored mode
has no serving task: every task trains and ends by itself.

The *serving* jobs (SERVING_JOBS) run only a TF server until their finishers are done: `ps` in
between-graph mode; `ps` and `worker` in in-graph and parameter-server-strategy modes.
"""

from __future__ import annotations

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
