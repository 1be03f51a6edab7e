"""parameter-server-strategy on a real local TensorFlow cluster: ps and worker tasks are real standard TF
servers, the chief a real ClusterCoordinator, each a `python -m training.task` process started from a plan's
run.json as the supervisor would start it. The only stand-in: every "machine" is 127.0.0.1 and shares one
run dir.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from testkit.local_cluster import running_cluster
from testkit.tf2_cluster import PS_STRATEGY, tf2_plan
from tests.helpers.results import points_are_progress, task_runs
from tests.helpers.waiting import wait_for
from tests.integration.tf2_helpers import (
    all_exited_zero,
    checkpoint_step,
    last_global_step,
    run_processes,
    steps_per_s,
    summary_values,
)
from training.cluster.placement import greedy_assign
from training.models.sizes import mlp_shapes

pytestmark = pytest.mark.integration

BATCH = 64
FAST = {"batch_size": BATCH, "checkpoint_every_steps": 100, "summary_every_steps": 50, "progress_interval": 0.2}
MLP_BYTES = sum(s.nbytes for s in mlp_shapes({}))
STEP_BYTES = 8


def test_coordinator_trains_on_two_workers_and_every_task_ends_by_itself(tmp_path: Path) -> None:
    plan = tf2_plan(PS_STRATEGY, workers=2, ps=1, training={**FAST, "steps": 300})
    run_dir = tmp_path / "run"
    with running_cluster(plan, run_dir) as cluster:
        all_exited_zero(cluster, 90)
    checkpoints = run_dir / "checkpoints"
    assert checkpoint_step(checkpoints) == 300
    assert [s for s, _ in summary_values(checkpoints, "loss")][-1] == 300
    own = cluster.events("chief", 0)
    assert own and all(e["coordinator"] is True and e["ps_bytes"] == {} for e in own)
    assert (own[-1]["local_step"], own[-1]["global_step"], own[-1]["examples"]) == (300, 300, 300 * BATCH)
    per_worker = {k: cluster.events("worker", k) for k in (0, 1)}
    for k, events in per_worker.items():
        assert events, f"no progress for worker:{k}\n{cluster.logs_tail()}"
        assert all(e["reported_by"] == "chief:0" and (e["job"], e["task"]) == ("worker", k) for e in events)
        assert steps_per_s(events) > 0
        steps = sum(e["steps"] for e in events)
        assert steps == events[-1]["local_step"] and events[-1]["examples"] == steps * BATCH
        pulled = sum(e["ps_bytes"]["ps-0"]["pulled"] for e in events)
        pushed = sum(e["ps_bytes"]["ps-0"]["pushed"] for e in events)
        assert (pulled, pushed) == (steps * (MLP_BYTES + STEP_BYTES), steps * MLP_BYTES)
    assert sum(events[-1]["local_step"] for events in per_worker.values()) == 300
    # one TensorBoard run per task, written by the coordinator: the points are its progress events' numbers
    runs = task_runs(run_dir / "summaries")
    assert set(runs) == {"chief:0", "worker:0", "worker:1"}
    assert points_are_progress(runs["chief:0"]["loss"], own)
    for k, events in per_worker.items():
        assert points_are_progress(runs[f"worker:{k}"]["loss"], events)
        assert runs[f"worker:{k}"]["ps_traffic/ps:0/pulled_bytes_per_s"] and runs[f"worker:{k}"]["steps_per_s"]
    for task in ("ps-0", "worker-0", "worker-1"):
        assert "chief:0 finished training" in cluster.log(task)
    assert run_processes(run_dir) == []


def test_variables_spread_over_two_ps_greedy_by_bytes(tmp_path: Path) -> None:
    """TF's own round robin would put layer1/kernel (64 KiB) and layer0/kernel (16 KiB) on different PS and
    both biases with them; the plan's rule (greedy by bytes, step counter first) is what the run must do."""
    plan = tf2_plan(PS_STRATEGY, workers=2, ps=2, training={**FAST, "steps": 60, "optimizer": "adam"})
    with running_cluster(plan, tmp_path / "run") as cluster:
        all_exited_zero(cluster, 90)
    landed = dict(re.findall(r"variable (\S+) \(\d+ bytes\) on /job:ps/replica:0/task:(\d)", cluster.log("chief-0")))
    shapes = mlp_shapes({})
    names = ["global_step", *(s.name for s in shapes)]
    expected = greedy_assign([STEP_BYTES, *(s.nbytes for s in shapes)], 2)
    assert {n: landed[n] for n in names} == {n: str(ps) for n, ps in zip(names, expected, strict=True)}
    for shape in shapes:  # Adam's slots sit next to their variable: the update runs on that PS
        assert landed[f"{shape.name}/m"] == landed[f"{shape.name}/v"] == landed[shape.name]
    assert expected != [i % 2 for i in range(len(expected))]  # the case where the two rules differ
    assert checkpoint_step(tmp_path / "run" / "checkpoints") == 60


def test_killed_ps_fails_the_coordinator_and_the_restarted_coordinator_resumes(tmp_path: Path) -> None:
    steps = 1200
    plan = tf2_plan(PS_STRATEGY, workers=2, ps=1, training={**FAST, "steps": steps})
    run_dir = tmp_path / "run"
    with running_cluster(plan, run_dir) as cluster:
        wait_for(lambda: last_global_step(cluster, "chief", 0) >= 250, 60, "250 global steps", explain=cluster.logs_tail)
        cluster.kill("ps-0", signal.SIGKILL)
        killed = time.monotonic()
        seen = last_global_step(cluster, "chief", 0)
        coordinator = cluster.procs["chief-0"]
        wait_for(lambda: coordinator.poll() is not None, 30, "the coordinator to fail", explain=cluster.logs_tail)
        failed_after = time.monotonic() - killed
        assert coordinator.returncode == 1, cluster.logs_tail()
        resume_from = checkpoint_step(run_dir / "checkpoints")
        for task in (plan.task("ps", 0), plan.task("chief", 0)):  # each one's supervisor restarts it
            cluster.start_task(task)
        all_exited_zero(cluster, 120)
    print(f"ps killed at global step >= {seen}; the coordinator failed {failed_after:.2f} s later; "
          f"resumed from checkpoint step {resume_from}")
    assert 200 <= resume_from <= seen
    assert f"restored {run_dir / 'checkpoints'}/ckpt-{resume_from} (global step {resume_from})" in \
        cluster.log("chief-0")
    # == steps, unless steps were in flight when a worker could not reach the restarted ps yet (the coordinator
    # then schedules again from the ps's counter, and a step that was still running adds to it)
    assert steps <= checkpoint_step(run_dir / "checkpoints") <= steps + 8
    assert run_processes(run_dir) == []


def test_slowed_worker_completes_fewer_steps(tmp_path: Path) -> None:
    """slowdown worker:1 = 4: a sleep op inside its steps, on the worker; the coordinator gives the other
    worker the steps it cannot take (asynchronous training)."""
    plan = tf2_plan(PS_STRATEGY, workers=2, ps=1, training={**FAST, "steps": 400, "slowdown": {"worker:1": 4.0}})
    with running_cluster(plan, tmp_path / "run") as cluster:
        all_exited_zero(cluster, 90)
    fast, slow = (cluster.events("worker", k)[-1]["local_step"] for k in (0, 1))
    assert fast + slow == 400
    assert slow < 0.6 * fast, (fast, slow)
