"""Whether a run can be resized: the one rule `tfcluster resize` and the dashboard's "remove this worker"
both ask (issue 37), so the two never disagree.

A run can be resized when it runs over SSH (a Slurm run's machines are its job's allocation: more needs a
new job), was started on every host (a host that never started has no supervisor to tell), and its mode
is one a resize knows how to change: a run of the user's own `[training] command` (its program reads
TF_CONFIG; a resize restarts only the tasks it says), an asynchronous between-graph run of a built-in
model (a new worker joins the running cluster, its sessions carrying the new cluster, and the ps tasks wait
for the current plan's finishers: training/cluster/joining.py, training/cluster/ps.py), or an in-graph or
multi-worker-mirrored one (the client, or the whole group, restarts with the new cluster and resumes from
the ps or the last checkpoint: orchestrator/run/resize_restart.py). Not yet: synchronous between-graph
(SyncReplicasOptimizer's accumulators and token queue live on the ps, sized for the old count) and
parameter-server-strategy (the coordinator's cluster is fixed when it starts, and its ps tasks would have
to restart with it).
"""

from __future__ import annotations

from orchestrator.run.records import RunRecord

BUILTIN_NOT_YET = ("resize of a {mode} run of a built-in model is not built yet (a run of your own `[training] "
                   "command`, or an asynchronous between-graph, in-graph or multi-worker-mirrored run can be "
                   "resized): nothing changed")
NOT_YET_MODES = ("parameter-server-strategy",)


def _builtin_mode_not_yet(record: RunRecord) -> str | None:
    """None when the run's tasks can take a resize; else the mode BUILTIN_NOT_YET names."""
    plan = record.plan
    if plan.uses_user_command:
        return None
    if plan.mode == "between-graph":
        return "synchronous between-graph" if plan.training.sync_replicas else None
    return plan.mode if plan.mode in NOT_YET_MODES else None


def resize_refusal(record: RunRecord) -> str:
    """"" when the run can be resized; else why not, one line (the CLI's refusal, exit 2)."""
    run = record.run_id
    if record.slurm is not None:
        return (f"run {run} is a Slurm job: a resize needs a new allocation, which is a new job "
                "(stop it and start again)")
    if record.status != "started":
        return f"run {run} is {record.shown_status}: only a run started on every host can be resized"
    if (mode := _builtin_mode_not_yet(record)) is not None:
        return BUILTIN_NOT_YET.format(mode=mode)
    return ""
