"""Whether a run can be resized: the one rule `tfcluster resize` and the dashboard's "remove this worker"
both ask (issue 37), so the two never disagree.

A run can be resized when it runs over SSH (a Slurm run's machines are its job's allocation: more needs a
new job), was started on every host (a host that never started has no supervisor to tell), and its mode
is one a resize knows how to change: a run of the user's own `[training] command` (its program reads
TF_CONFIG; a resize restarts only the tasks it says), or an asynchronous between-graph run of a built-in
model (a new worker joins the running cluster, its sessions carrying the new cluster, and the ps tasks wait
for the current plan's finishers: training/cluster/joining.py, training/cluster/ps.py). Not yet: synchronous
between-graph (SyncReplicasOptimizer aggregates a fixed number of replicas), in-graph and the TF2 modes.
"""

from __future__ import annotations

from orchestrator.run.records import RunRecord

BUILTIN_NOT_YET = ("resize of a {mode} run of a built-in model is not built yet (only a run of your own "
                   "`[training] command` or an asynchronous between-graph run can be resized): nothing changed")


def _builtin_mode_not_yet(record: RunRecord) -> str | None:
    """None when the run's tasks can take a resize; else the mode BUILTIN_NOT_YET names."""
    plan = record.plan
    if plan.uses_user_command:
        return None
    if plan.mode == "between-graph":
        return "synchronous between-graph" if plan.training.sync_replicas else None
    return plan.mode


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
