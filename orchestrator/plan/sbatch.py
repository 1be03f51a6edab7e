"""The sbatch side of a [slurm] job: the options of its allocation, and the standalone script that
`tfcluster export slurm` writes. Text only, from a SlurmPlan (orchestrator.plan.slurm).

The allocation: `--nodes=N --ntasks-per-node=M`, M the most tasks the plan puts on one node (a job whose
tasks do not divide evenly holds N*M task slots and leaves the last ones idle: Slurm alone would spread
the tasks by its CPUs, not as the plan does), then the section's keys and `sbatch_args` as they are. Every
value is validated by orchestrator.config.slurm_schema (no whitespace, quote or newline can reach an
#SBATCH line); the job name is the cluster's, reduced to letters, digits, `_`, `.` and `-`.

The script (POSIX sh): its header is the allocation; its body needs, on the nodes, the [remote] python (with
TensorFlow; for a built-in model also tfcluster itself, whose package each task runs) and
Slurm's srun, scontrol and scancel. It starts ONE job step of one rank per task, each rank (SLURM_PROCID)
placed on its planned node by `--distribution=arbitrary`, and runs orchestrator.plan.slurm_rank (given as
the source of `python -c`) in each: TF_CONFIG per rank from SLURM_PROCID and the allocation's nodes. The
job (placeholders, ports, environments, commands) travels in the environment, compressed; nothing in it is
ever read by a shell.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from orchestrator.plan import slurm_rank
from orchestrator.plan.slurm import SlurmPlan

# What srun runs in every rank: the rank program, with SIGUSR1 ignored until it installs its handler.
RANK_COMMAND = "/bin/sh -c 'trap \"\" USR1; exec \"$0\" -c \"$1\" run' \"$TFCLUSTER_PYTHON\" \"$TFCLUSTER_SLURM_RANK\""


def job_name(cluster_name: str) -> str:
    """The cluster's name as a Slurm job name and a run dir name: no path separator, space or newline."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", cluster_name).strip("-.") or "tfcluster"


def sbatch_options(job: SlurmPlan) -> list[list[str]]:
    """The allocation's sbatch options, each option with the words that follow it (one #SBATCH line each)."""
    s = job.slurm
    options = [[f"--job-name={job_name(job.plan.cluster_name)}"], [f"--nodes={s.nodes}"],
               [f"--ntasks-per-node={max(job.tasks_per_node)}"]]
    for option, value in (("--partition", s.partition), ("--time", s.time), ("--account", s.account),
                          ("--qos", s.qos), ("--gpus-per-node", s.gpus_per_node or None),
                          ("--cpus-per-task", s.cpus_per_task), ("--mem", s.mem)):
        if value is not None:
            options.append([f"{option}={value}"])
    for word in s.sbatch_args:  # an option, then the values given as separate words
        if word.startswith("-") or not options:
            options.append([word])
        else:
            options[-1].append(word)
    return options


def sbatch_header(job: SlurmPlan) -> list[str]:
    return [f"#SBATCH {' '.join(option)}" for option in sbatch_options(job)]


def layout_comment(job: SlurmPlan) -> list[str]:
    """`#   rank 0  chief:0  node 0` lines: where each rank runs, nodes in name order."""
    return [f"#   rank {rank:<4} {task.name:<12} node {job.node_of_rank(rank)}"
            for rank, task in enumerate(job.ranks)]


def export_script(job: SlurmPlan, source: str) -> str:
    """The standalone sbatch script that runs `job` (planned in node indexes) without tfcluster."""
    rank_source = Path(slurm_rank.__file__).read_text(encoding="utf-8")
    plan = job.plan
    python = plan.hosts[0].python
    encoded = slurm_rank.encode_job({"plan": plan.to_json(compact=True), "tasks_per_node": list(job.tasks_per_node),
                                     "run_name": job_name(plan.cluster_name)})
    what = "your command" if plan.uses_user_command else f"the built-in `{plan.training.model}` model"
    needs = "TensorFlow" if plan.uses_user_command else "TensorFlow and tfcluster (its package runs the model)"
    lines = [
        "#!/bin/sh",
        *sbatch_header(job),
        f"# Written by `tfcluster export slurm {source}`: {plan.mode}, {what}, {len(plan.tasks)} tasks on "
        f"{len(job.nodes)} nodes,",
        "# one rank per task; nodes are numbered in the order of their names (as SlurmClusterResolver sorts them):",
        *layout_comment(job),
        f"# It needs on every node {shlex.quote(python)} with {needs}, and srun, scontrol, scancel.",
        f"# Each task's output: <workdir>/runs/{job_name(plan.cluster_name)}-slurm-<job id>/<node>/logs/<job>-<task>.log.",
        "set -eu",
        "umask 077",
        f"TFCLUSTER_PYTHON={shlex.quote(python)}",
        f"TFCLUSTER_SLURM_PLAN={shlex.quote(encoded)}",
        "# orchestrator/plan/slurm_rank.py of tfcluster, run by `python -c` below:",
        f"TFCLUSTER_SLURM_RANK={shlex.quote(rank_source)}",
        "export TFCLUSTER_SLURM_PLAN TFCLUSTER_SLURM_RANK",
        "# The allocation's nodes in name order, with their NodeAddr: where the tasks dial each other.",
        'TFCLUSTER_SLURM_NODES=$("$TFCLUSTER_PYTHON" -c "$TFCLUSTER_SLURM_RANK" nodes)',
        "export TFCLUSTER_SLURM_NODES",
        "# Every rank on its planned node: one node name per rank (srun --distribution=arbitrary).",
        "SLURM_HOSTFILE=$(mktemp)",
        "trap 'rm -f \"$SLURM_HOSTFILE\"' EXIT",
        '"$TFCLUSTER_PYTHON" -c "$TFCLUSTER_SLURM_RANK" hostfile > "$SLURM_HOSTFILE"',
        "export SLURM_HOSTFILE",
        "unset SLURM_NTASKS_PER_NODE  # the allocation's count, not this step's (srun would warn)",
        "# Each rank starts with SIGUSR1 (the end of the run, from the chief's rank) ignored until it handles it.",
        f"srun --ntasks={len(plan.tasks)} --distribution=arbitrary --kill-on-bad-exit=1 "
        + RANK_COMMAND,
    ]
    return "\n".join(lines) + "\n"
