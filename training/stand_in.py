"""Stand in for a finisher that failed for good: tell the serving tasks it will not finish.

Run by the host's supervisor (`python -m training.task` with `TFCLUSTER_STAND_IN=1` and the dead
task's environment) when a built-in between-graph worker or chief, or the in-graph client, exited
with an error and will not be restarted. It enqueues `"<job>:<index> (stand-in)"` on the done queue of
every serving task that task would have signalled (training/ps.py), through each serving task's own
server (this process starts none: the dead task's port may still be taken by its leftovers). Without
it the ps tasks would serve until `stop`, and the run would never end by itself.
"""

from __future__ import annotations

import logging

from training.context import TaskContext
from training.ps import STAND_IN_SUFFIX, serving_targets, signal_done
from training.roles import is_finisher

log = logging.getLogger("tfcluster.stand_in")


def run(ctx: TaskContext, timeout_s: float = 30.0) -> int:
    if not is_finisher(ctx.mode, ctx.job):
        log.info("%s is not waited for by any serving task: nothing to do", ctx.name)
        return 0
    targets = serving_targets(ctx.mode, ctx.cluster_spec)
    spec = ctx.cluster_spec
    signalled = signal_done(lambda job, index: f"grpc://{spec[job][index]}", ctx.name + STAND_IN_SUFFIX,
                            targets, None, timeout_s=timeout_s)
    missed = [f"{job}:{index}" for job, index in targets if (job, index) not in signalled]
    if missed:
        log.warning("could not reach %s (gone already?)", ", ".join(missed))
    log.info("told %d of %d serving tasks that %s will not finish", len(signalled), len(targets), ctx.name)
    return 0 if not missed else 1
