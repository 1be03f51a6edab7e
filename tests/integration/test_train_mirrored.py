"""multi-worker-mirrored on a real local TensorFlow cluster: every task is a real `python -m training.task`
process started from a plan's run.json as the supervisor would start it (testkit/local_cluster.py,
testkit/tf2_cluster.py). The only stand-in: every "machine" is 127.0.0.1 and shares one run dir.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from testkit.local_cluster import running_cluster
from testkit.tf2_cluster import MIRRORED, tf2_plan
from tests.integration.tf2_helpers import (
    all_exited_zero,
    checkpoint_step,
    last_global_step,
    run_processes,
    steps_per_s,
    summary_values,
    wait_for,
)

pytestmark = pytest.mark.integration

BATCH = 64
FAST = {"batch_size": BATCH, "checkpoint_every_steps": 100, "summary_every_steps": 50, "progress_interval": 0.2}


@pytest.mark.parametrize("chief", [False, True], ids=["two workers", "chief and a worker"])
def test_group_trains_checkpoints_and_exits(tmp_path: Path, chief: bool) -> None:
    plan = tf2_plan(MIRRORED, workers=1 if chief else 2, chief=chief, training={**FAST, "steps": 300})
    run_dir = tmp_path / "run"
    with running_cluster(plan, run_dir) as cluster:
        all_exited_zero(cluster, 90)
    checkpoints = run_dir / "checkpoints"
    assert checkpoint_step(checkpoints) == 300
    assert sorted(p.name for p in checkpoints.glob("ckpt-*.index")) == ["ckpt-100.index", "ckpt-200.index",
                                                                          "ckpt-300.index"]
    assert not any((run_dir / "tmp").iterdir()), "a non-chief task left its share of a checkpoint behind"
    assert [s for s, _ in summary_values(checkpoints, "loss")] == [50, 100, 150, 200, 250, 300]
    trainers = [(t.job, t.index) for t in plan.tasks]
    assert len(trainers) == 2 and plan.chief.job == ("chief" if chief else "worker")
    for job, index in trainers:
        events = cluster.events(job, index)
        assert events, f"{job}:{index} wrote no progress\n{cluster.logs_tail()}"
        last = events[-1]
        assert (last["local_step"], last["global_step"], last["examples"]) == (300, 300, 300 * BATCH)
        assert last["ps_bytes"] == {} and steps_per_s(events) > 0
        assert events[-1]["loss"] < events[0]["loss"]
    assert "2 replicas in sync" in cluster.log(plan.chief.name)
    assert run_processes(run_dir) == []
    if not chief:  # a group started again after the end restores the last step and ends at once, agreeing
        with running_cluster(plan, run_dir) as again:  # not to save (a save only some tasks join would hang)
            all_exited_zero(again, 60)
        assert again.log("worker-0").count("(global step 300)") == 1
        assert checkpoint_step(checkpoints) == 300 and len(list(checkpoints.glob("ckpt-*.index"))) == 3


def test_killed_worker_fails_the_group_and_the_restarted_group_resumes(tmp_path: Path) -> None:
    steps = 2500
    plan = tf2_plan(MIRRORED, workers=2, training={**FAST, "steps": steps})
    run_dir = tmp_path / "run"
    with running_cluster(plan, run_dir) as cluster:
        wait_for(lambda: last_global_step(cluster, "worker", 0) >= 300, 60, "300 global steps", cluster)
        cluster.kill("worker-1", signal.SIGKILL)
        killed = time.monotonic()
        survivor = cluster.procs["worker-0"]
        wait_for(lambda: survivor.poll() is not None, 30, "the survivor to fail", cluster)
        failed_after = time.monotonic() - killed
        assert survivor.returncode == 1, cluster.logs_tail()
        assert re.search(r"UnavailableError|DeadlineExceededError|coordination|heartbeat",
                         cluster.log("worker-0")), cluster.logs_tail()
        resume_from = checkpoint_step(run_dir / "checkpoints")
        before = {t.name: len(cluster.events(t.job, t.index)) for t in plan.tasks}
        for task in plan.tasks:  # the whole group restarts, as the supervisor's policy for this mode does
            cluster.start_task(task)
        all_exited_zero(cluster, 120)
    print(f"survivor failed {failed_after:.2f} s after the kill; resumed from step {resume_from}")
    assert checkpoint_step(run_dir / "checkpoints") == steps
    assert f"(global step {resume_from})" in cluster.log("worker-0")
    for task in plan.tasks:
        after = cluster.events(task.job, task.index)[before[task.name]:]
        assert after, f"{task.name} wrote no progress after the restart\n{cluster.logs_tail()}"
        assert min(e["global_step"] for e in after) > resume_from  # never back past the checkpoint
        assert after[-1]["global_step"] == steps
        assert after[-1]["local_step"] == steps - resume_from  # a new process counts from 0
    assert run_processes(run_dir) == []
