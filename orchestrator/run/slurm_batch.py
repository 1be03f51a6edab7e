"""The batch script `tfcluster start` submits for a [slurm] run (POSIX sh; text only, from the job's plan).

It holds the allocation while `start` prepares every node through steps of its own (orchestrator.run.
slurm_start), and then runs the nodes' supervisors as ONE step of the job, one task per node, so Slurm
accounts for every process of the run and ends them with the job:

1. its header is the allocation (orchestrator.plan.sbatch.sbatch_options), then `--no-requeue` (a job
   Slurm requeued would start over behind its supervisors' backs: a run's restarts are theirs),
   `--output=/dev/null` and `--chdir=/` (nothing is written where sbatch ran; the script writes its own
   lines to the batch node's `logs/slurm-batch.log`);
2. it waits for `go` in the batch node's run dir (written by that node's hand-over at `start`'s go:
   training/supervisor/handover.py), at most GO_WAIT_S more than start's timeout, then ends the job;
3. `srun` of `<python> -S -m <package>.supervisor --step` on every node (its run dir named from
   SLURMD_NODENAME: issue 20's per-host dirs keep nodes that share a filesystem apart), with every CPU
   of each node (a step's default) and its GPUs;
4. a supervisor stopped by SIGTERM exits STOPPED_EXIT: then the script keeps the allocation up to
   STOP_HOLD_S so that `stop` can verify every node before it cancels the job itself (were the job to end
   as the last supervisor exits, Slurm would kill the verifying steps); any other exit is the job's.

Nothing secret is in it: no forwarded variable, no channel key (those travel in the start conversation).
"""

from __future__ import annotations

import shlex

from orchestrator.plan.sbatch import job_name, sbatch_header
from orchestrator.plan.slurm import SlurmPlan
from orchestrator.transport.base import remote_path
from training.run.layout import host_module
from training.supervisor.handover import GO_FILE, STOPPED_EXIT

GO_WAIT_S = 600  # beyond start's timeout, before a batch script whose start went away ends the job
STOP_HOLD_S = 60  # how long a stopped run's allocation waits for `stop` to cancel it
BATCH_LOG = "slurm-batch.log"  # in the batch node's logs/
SUPERVISORS_STEP = "tfcluster-supervisors"  # the step's name, as squeue -s lists it


def start_script(job: SlurmPlan, run_id: str, start_timeout: float) -> str:
    host = job.plan.hosts[0]
    nodes = len(job.nodes)
    gpus = [f"--gpus-per-node={job.slurm.gpus_per_node}"] if job.slurm.gpus_per_node else []
    step = ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=0", *gpus,
            f"--job-name={SUPERVISORS_STEP}",
            "/bin/sh", "-c", 'here="$0/$SLURMD_NODENAME"; cd "$here/lib" && TFCLUSTER_RUN_DIR="$here" exec "$1" -S -m '
            f'{host_module("supervisor")} --step --run-dir "$here" --host "$SLURMD_NODENAME"']
    waits = int((start_timeout + GO_WAIT_S) * 10)  # tenths of a second
    lines = [
        "#!/bin/sh",
        *sbatch_header(job),
        "#SBATCH --no-requeue",
        "#SBATCH --output=/dev/null",
        "#SBATCH --chdir=/",
        f"# Written by `tfcluster start` for run {run_id} ({job_name(job.plan.cluster_name)}): it holds the "
        "allocation while",
        "# start prepares every node, then runs the nodes' supervisors as one step, which start the tasks.",
        "umask 077",
        'cd "$HOME" 2>/dev/null || cd /',
        f"run={remote_path(host.workdir)}/runs/{shlex.quote(run_id)}",
        'here="$run/$SLURMD_NODENAME"',
        f'mkdir -p "$here/logs" && exec >>"$here/logs/{BATCH_LOG}" 2>&1',
        "waited=0",
        f'while [ ! -e "$here/{GO_FILE}" ]; do',
        f'  if [ "$waited" -ge {waits} ]; then echo "tfcluster: no go from tfcluster start: ending the job"; exit 1; fi',
        "  sleep 0.1; waited=$((waited + 1))",
        "done",
        f'rm -f "$here/{GO_FILE}"',
        " ".join(shlex.quote(word) for word in step) + f' "$run" {remote_path(host.python)}',
        "code=$?",
        f'if [ "$code" -eq {STOPPED_EXIT} ]; then',
        "  echo 'tfcluster: the run was stopped; holding the allocation until tfcluster stop cancels the job'",
        f"  sleep {STOP_HOLD_S}",
        "  exit 0",
        "fi",
        'exit "$code"',
    ]
    return "\n".join(lines) + "\n"
