"""The Slurm test cluster itself (testkit/slurm.py): real munged, slurmctld and three slurmd on this machine.
A job step runs one task on each node, under the node's own name and address; sbatch, squeue and scancel
work; a cancelled job leaves no process."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from testkit.slurm import SlurmCluster
from tests.helpers.waiting import wait_for


def test_a_step_of_three_nodes_runs_one_task_on_each(slurm_cluster: SlurmCluster) -> None:
    res = slurm_cluster.run("srun", "--nodes=3", "--ntasks-per-node=1", "/bin/sh", "-c",
                            'echo "$SLURM_PROCID $SLURMD_NODENAME $SLURM_STEP_NODELIST"', timeout=60)
    assert res.returncode == 0, res.stderr
    lines = sorted(res.stdout.split("\n")[:-1])
    assert lines == ["0 n1 n[1-3]", "1 n2 n[1-3]", "2 n3 n[1-3]"]
    assert slurm_cluster.node_addresses() == {"n1": "127.0.0.11", "n2": "127.0.0.12", "n3": "127.0.0.13"}
    for name in slurm_cluster.nodes:  # only Slurm knows these names, as on many clusters
        with pytest.raises(socket.gaierror):
            socket.getaddrinfo(name, None)


def test_sbatch_parsable_squeue_and_scancel(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    script = tmp_path / "sleeper.sbatch"
    script.write_text("#!/bin/sh\n#SBATCH --nodes=2\n#SBATCH --job-name=sleeper\nsrun sleep 600\n")
    job = slurm_cluster.submit(script, cwd=tmp_path)
    assert job.isdigit()
    wait_for(lambda: slurm_cluster.job(job).get("JobState") == "RUNNING" and slurm_cluster.job_processes(job), 30,
             f"job {job} running", explain=lambda: str(slurm_cluster.job(job)))
    queue = slurm_cluster.run("squeue", "--noheader", "--format=%i %j %T %D", "--jobs", job)
    assert queue.stdout.split() == [job, "sleeper", "RUNNING", "2"]
    assert slurm_cluster.run("scancel", job).returncode == 0
    fields = slurm_cluster.wait_job(job, timeout=30)
    assert fields["JobState"] == "CANCELLED"
    wait_for(lambda: not slurm_cluster.job_processes(job), 30, f"every process of job {job} gone",
             explain=lambda: str([p.pid for p in slurm_cluster.job_processes(job)]))
