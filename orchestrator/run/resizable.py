"""Whether a run can be resized: the one rule `tfcluster resize` and the dashboard's "remove this worker"
both ask (issue 37), so the two never disagree.

A run can be resized when it runs over SSH (a Slurm run's machines are its job's allocation: more needs a
new job) and was started on every host (a host that never started has no supervisor to tell). Every mode
then knows how to change: a run of the user's own `[training] command` (its program reads TF_CONFIG; a
resize restarts only the tasks it says), an asynchronous between-graph run of a built-in model (a new
worker joins the running cluster, its sessions carrying the new cluster, and the ps tasks wait for the
current plan's finishers: training/cluster/joining.py, training/cluster/ps.py), and the built-in modes that
restart with the new cluster and resume from the ps or the last checkpoint: in-graph (the client),
multi-worker-mirrored (the group), synchronous between-graph and parameter-server-strategy (every kept
task, the ps too: orchestrator/run/resize_restart.py).
"""

from __future__ import annotations

from orchestrator.run.records import RunRecord


def resize_refusal(record: RunRecord) -> str:
    """"" when the run can be resized; else why not, one line (the CLI's refusal, exit 2)."""
    run = record.run_id
    if record.slurm is not None:
        return (f"run {run} is a Slurm job: a resize needs a new allocation, which is a new job "
                "(stop it and start again)")
    if record.status != "started":
        return f"run {run} is {record.shown_status}: only a run started on every host can be resized"
    return ""
