"""Whether a run can be resized: the one rule `tfcluster resize` and the dashboard's "remove this worker"
both ask (issue 37), so the two never disagree.

A run can be resized when it runs over SSH (a Slurm run's machines are its job's allocation: more needs a
new job), was started on every host (a host that never started has no supervisor to tell), and its mode
is one a resize knows how to change: for now a run of the user's own `[training] command` (its program
reads TF_CONFIG; a resize restarts only the tasks it says).
"""

from __future__ import annotations

from orchestrator.run.records import RunRecord

BUILTIN_NOT_YET = ("resize of a {mode} run of a built-in model is not built yet (only a run of your own "
                   "`[training] command` can be resized): nothing changed")


def resize_refusal(record: RunRecord) -> str:
    """"" when the run can be resized; else why not, one line (the CLI's refusal, exit 2)."""
    run = record.run_id
    if record.slurm is not None:
        return (f"run {run} is a Slurm job: a resize needs a new allocation, which is a new job "
                "(stop it and start again)")
    if record.status != "started":
        return f"run {run} is {record.shown_status}: only a run started on every host can be resized"
    if not record.plan.uses_user_command:
        return BUILTIN_NOT_YET.format(mode=record.plan.mode)
    return ""
