"""The first step of a [slurm] run's job (`slurm_start.make_first_step`) on the real test cluster while a node of
the job is flagged not responding: its slurmd stopped until slurmctld's ping times out, as a loaded slurmd's
does. Slurm refuses a job's first step then ("Requested nodes are busy"), and a plain srun would wait 60-69 s
before asking again (benchmarks/results/slurm_first_step.md). `make_first_step` says why it waits, asks again
every few seconds, and returns once the node answers."""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import pytest

from orchestrator.errors import TfclusterError
from orchestrator.run.slurm_job import SlurmClient
from orchestrator.run.slurm_start import make_first_step
from orchestrator.transport.local import LocalTransport
from testkit.slurm import SlurmCluster
from tests.helpers.waiting import wait_for
from tests.integration.slurm_helpers import slurm_env

pytestmark = pytest.mark.integration
__all__ = ["slurm_env"]  # the module's fixture: the client commands talk to the test cluster


def test_the_first_step_waits_out_a_node_not_responding(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    (tmp_path / "hold.sh").write_text("#!/bin/sh\nsleep 300\n")
    job = slurm_cluster.submit(tmp_path / "hold.sh", "--nodelist=n2", "--output=/dev/null")
    client = SlurmClient(LocalTransport("slurm"))
    said: queue.Queue[str] = queue.Queue()
    ended: list[BaseException | None] = []

    def first_step() -> None:
        try:
            make_first_step(client, job, 1, lambda job_id, line: said.put(line), timeout=120, poll=0.2)
            ended.append(None)
        except (TfclusterError, OSError) as exc:
            ended.append(exc)

    try:
        wait_for(lambda: slurm_cluster.job(job).get("JobState") == "RUNNING", 60, "the job to run",
                 explain=lambda: slurm_cluster.explain(job))
        thread = threading.Thread(target=first_step, daemon=True)
        with slurm_cluster.not_responding("n2"):
            thread.start()
            assert said.get(timeout=60) == (
                f"RUNNING, no step can start yet (Unable to create step for job {job}: Requested nodes are busy)")
            assert not ended  # it asks again while the node does not answer
        thread.join(timeout=120)
        assert ended == [None], ended
    finally:
        slurm_cluster.run("scancel", job)
        slurm_cluster.wait_job(job, 60)
        client.close()
