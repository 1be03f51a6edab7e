"""multi-worker-mirrored on a real local TensorFlow cluster: every task is a real `python -m training.task`
process started from a plan's run.json as the supervisor would start it (testkit/local_cluster.py,
testkit/tf2_cluster.py). The only stand-in: every "machine" is 127.0.0.1 and shares one run dir.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.local_cluster import running_cluster
from testkit.tf2_cluster import MIRRORED, tf2_plan
from tests.integration.tf2_helpers import (
    all_exited_zero,
    checkpoint_step,
    run_processes,
    steps_per_s,
    summary_values,
)

pytestmark = pytest.mark.integration

BATCH = 64
STEPS = 150  # three checkpoints and six summaries: what counts here is that each lands where due
FAST = {"batch_size": BATCH, "checkpoint_every_steps": 50, "summary_every_steps": 25,
        "progress_interval": 0.2}


# Two workers (and their group restart) run over the real sshd in test_tf2_modes_sshd.py; here a chief
# with one worker, the other shape of the group.
def test_group_with_a_chief_trains_checkpoints_and_exits(tmp_path: Path) -> None:
    plan = tf2_plan(MIRRORED, workers=1, chief=True, training={**FAST, "steps": STEPS})
    run_dir = tmp_path / "run"
    with running_cluster(plan, run_dir) as cluster:
        all_exited_zero(cluster, 90)
    checkpoints = run_dir / "checkpoints"
    assert checkpoint_step(checkpoints) == STEPS
    assert {p.name for p in checkpoints.glob("ckpt-*.index")} == {"ckpt-50.index", "ckpt-100.index",
                                                                    "ckpt-150.index"}
    assert not any((run_dir / "tmp").iterdir()), "a non-chief task left its share of a checkpoint behind"
    assert [s for s, _ in summary_values(checkpoints, "loss")] == [25, 50, 75, 100, 125, 150]
    trainers = [(t.job, t.index) for t in plan.tasks]
    assert len(trainers) == 2 and plan.chief.job == "chief"
    for job, index in trainers:
        events = cluster.events(job, index)
        assert events, f"{job}:{index} wrote no progress\n{cluster.logs_tail()}"
        last = events[-1]
        assert (last["local_step"], last["global_step"], last["examples"]) == (STEPS, STEPS, STEPS * BATCH)
        assert last["ps_bytes"] == {} and steps_per_s(events) > 0
        assert events[-1]["loss"] < events[0]["loss"]
    assert "2 replicas in sync" in cluster.log(plan.chief.name)
    assert run_processes(run_dir) == []
