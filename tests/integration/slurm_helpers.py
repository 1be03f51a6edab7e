"""What the tests of `start` on the real Slurm share: the CLI's environment for the test cluster, the run a
state dir holds, the job's end as Slurm says it, and the check that nothing of a run is left."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.run.slurm_job import ENDED
from testkit.slurm import SlurmCluster
from tests.helpers.procs import cmdline
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import records, run_processes, status_json


@pytest.fixture(scope="module", autouse=True)
def slurm_env(slurm_cluster: SlurmCluster) -> Iterator[None]:
    """The CLI's Slurm commands talk to the test cluster (and to no job this test run may be inside)."""
    with pytest.MonkeyPatch.context() as mp:
        for name in [n for n in os.environ if n.startswith("SLURM_")]:
            mp.delenv(name)
        mp.setenv("SLURM_CONF", str(slurm_cluster.conf))
        yield


def run_id_of(state_dir: Path) -> str:
    """The one run recorded in `state_dir`."""
    found = records(state_dir)
    assert len(found) == 1, found
    return str(found[0]["run_id"])


def job_of(state_dir: Path) -> str:
    """The Slurm job id of the one run recorded in `state_dir`, once it was submitted."""
    return str(wait_for(lambda: (records(state_dir) or [{}])[0].get("slurm", {}).get("job_id"), 60,
                        "the run's job id in its record", interval=0.2))


def running(state_dir: Path) -> bool:
    return bool(records(state_dir)) and records(state_dir)[0]["status"] == "started"


def settled(state_dir: Path, run_id: str) -> tuple[int, dict[str, Any]]:
    """`status --json` once the run's job has ended (its supervisors may say `finished` a moment before
    their step and the batch script end)."""
    seen: list[tuple[int, dict[str, Any]]] = []

    def ended() -> bool:
        seen[:] = [status_json(state_dir, run_id)]
        return seen[0][1]["slurm"]["state"] in ENDED

    wait_for(ended, 60, "the job's end in status", interval=0.5, explain=lambda: str(seen))
    return seen[0]


def assert_nothing_left(cluster: SlurmCluster, run_id: str, job: str) -> None:
    """No process of the run (by its marker) or of its job (slurmstepd included), and squeue has no job."""
    wait_for(lambda: not run_processes(run_id) and not cluster.job_processes(job), 30, "the job's processes to end",
             explain=lambda: str([cmdline(p) for p in run_processes(run_id) + cluster.job_processes(job)]))
    assert cluster.run("squeue", "-h", "-j", job).stdout.strip() == ""
