"""parameter-server-strategy on a real local TensorFlow cluster: ps and worker tasks are real standard TF
servers, the chief a real ClusterCoordinator, each a `python -m training.task` process started from a plan's
run.json as the supervisor would start it. The only stand-in: every "machine" is 127.0.0.1 and shares one
run dir.

Each TF process costs seconds of CPU to start, so two runs serve every check: one clean run that the first
three tests read (`clean_run`: they stay together on one pytest-xdist worker), and one whose ps is killed.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.local_cluster import LocalCluster, running_cluster
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
FAST = {"batch_size": BATCH, "checkpoint_every_steps": 100, "summary_every_steps": 50,
        "progress_interval": 0.2}
STEP_BYTES = 8
STEPS = 300  # of the clean run
# bytes of the variables the plan places: the step counter first, then the model's (sizes.py order)
SIZES = [STEP_BYTES, *(s.nbytes for s in mlp_shapes({}))]
CLEAN_RUN = pytest.mark.xdist_group("test_train_ps_strategy-clean-run")


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A finished run that nothing disturbed: the coordinator and two workers over two ps tasks, Adam, and
    worker 1 slowed down x4 (a sleep op inside its steps, on the worker). Every task has exited 0."""
    plan = tf2_plan(PS_STRATEGY, workers=2, ps=2,
                    training={**FAST, "steps": STEPS, "optimizer": "adam", "slowdown": {"worker:1": 4.0}})
    with running_cluster(plan, tmp_path_factory.mktemp("clean") / "run") as cluster:
        all_exited_zero(cluster, 90)
        yield cluster


def bytes_per_step() -> dict[str, tuple[int, int]]:
    """(pulled, pushed) accounted per step on each ps task: each step reads every variable once and the step
    counter, and pushes one gradient per variable, to the ps task the plan's rule put it on."""
    out = {"ps-0": (0, 0), "ps-1": (0, 0)}
    for i, (nbytes, ps) in enumerate(zip(SIZES, greedy_assign(SIZES, 2), strict=True)):
        pulled, pushed = out[f"ps-{ps}"]
        out[f"ps-{ps}"] = (pulled + nbytes, pushed + (nbytes if i else 0))  # i == 0: the step counter
    return out


@CLEAN_RUN
def test_coordinator_trains_on_two_workers_and_every_task_ends_by_itself(clean_run: LocalCluster) -> None:
    cluster, run_dir = clean_run, clean_run.run_dir
    checkpoints = run_dir / "checkpoints"
    assert checkpoint_step(checkpoints) == STEPS
    assert [s for s, _ in summary_values(checkpoints, "loss")][-1] == STEPS
    own = cluster.events("chief", 0)
    assert own and all(e["coordinator"] is True and e["ps_bytes"] == {} for e in own)
    last = own[-1]
    assert (last["local_step"], last["global_step"], last["examples"]) == (STEPS, STEPS, STEPS * BATCH)
    per_worker = {k: cluster.events("worker", k) for k in (0, 1)}
    per_step = bytes_per_step()
    for k, events in per_worker.items():
        assert events, f"no progress for worker:{k}\n{cluster.logs_tail()}"
        assert all(e["reported_by"] == "chief:0" and (e["job"], e["task"]) == ("worker", k) for e in events)
        assert steps_per_s(events) > 0
        steps = sum(e["steps"] for e in events)
        assert steps == events[-1]["local_step"] and events[-1]["examples"] == steps * BATCH
        traffic = {ps: (sum(e["ps_bytes"][ps]["pulled"] for e in events),
                        sum(e["ps_bytes"][ps]["pushed"] for e in events)) for ps in per_step}
        assert traffic == {ps: (steps * pulled, steps * pushed) for ps, (pulled, pushed) in per_step.items()}
    assert sum(events[-1]["local_step"] for events in per_worker.values()) == STEPS
    # one TensorBoard run per task, written by the coordinator: the points are its progress events' numbers
    runs = task_runs(run_dir / "summaries")
    assert set(runs) == {"chief:0", "worker:0", "worker:1"}
    assert points_are_progress(runs["chief:0"]["loss"], own)
    for k, events in per_worker.items():
        assert points_are_progress(runs[f"worker:{k}"]["loss"], events)
        assert runs[f"worker:{k}"]["steps_per_s"]
        assert runs[f"worker:{k}"]["ps_traffic/ps:0/pulled_bytes_per_s"]
        assert runs[f"worker:{k}"]["ps_traffic/ps:1/pulled_bytes_per_s"]
    for task in ("ps-0", "ps-1", "worker-0", "worker-1"):
        assert "chief:0 finished training" in cluster.log(task)
    assert run_processes(run_dir) == []


@CLEAN_RUN
def test_variables_spread_over_two_ps_greedy_by_bytes(clean_run: LocalCluster) -> None:
    """TF's own round robin would put layer1/kernel (64 KiB) and layer0/kernel (16 KiB) on different PS and
    both biases with them; the plan's rule (greedy by bytes, step counter first) is what the run must do."""
    placed = r"variable (\S+) \(\d+ bytes\) on /job:ps/replica:0/task:(\d)"
    landed = dict(re.findall(placed, clean_run.log("chief-0")))
    shapes = mlp_shapes({})
    names = ["global_step", *(s.name for s in shapes)]
    expected = greedy_assign(SIZES, 2)
    assert {n: landed[n] for n in names} == {n: str(ps) for n, ps in zip(names, expected, strict=True)}
    for shape in shapes:  # Adam's slots sit next to their variable: the update runs on that PS
        assert landed[f"{shape.name}/m"] == landed[f"{shape.name}/v"] == landed[shape.name]
    assert expected != [i % 2 for i in range(len(expected))]  # the case where the two rules differ
    assert checkpoint_step(clean_run.run_dir / "checkpoints") == STEPS


@CLEAN_RUN
def test_slowed_worker_completes_fewer_steps(clean_run: LocalCluster) -> None:
    """slowdown worker:1 = 4: a sleep op inside its steps, on the worker; the coordinator gives the other
    worker the steps it cannot take (asynchronous training)."""
    fast, slow = (clean_run.events("worker", k)[-1]["local_step"] for k in (0, 1))
    assert fast + slow == STEPS
    assert slow < 0.6 * fast, (fast, slow)


def test_killed_ps_fails_the_coordinator_and_the_restarted_coordinator_resumes(tmp_path: Path) -> None:
    """The workers are paced (each step sleeps as long as it took, on the worker): the run lasts seconds
    past the kill without more steps to compute."""
    steps = 400
    plan = tf2_plan(PS_STRATEGY, workers=2, ps=1, training={
        **FAST, "steps": steps, "checkpoint_every_steps": 50, "slowdown": {"worker:0": 2.0, "worker:1": 2.0}})
    run_dir = tmp_path / "run"
    with running_cluster(plan, run_dir) as cluster:
        wait_for(lambda: last_global_step(cluster, "chief", 0) >= 120, 60, "120 global steps",
                 explain=cluster.logs_tail)
        cluster.kill("ps-0", signal.SIGKILL)
        killed = time.monotonic()
        coordinator = cluster.procs["chief-0"]
        wait_for(lambda: coordinator.poll() is not None, 30, "the coordinator to fail",
                 explain=cluster.logs_tail)
        failed_after = time.monotonic() - killed
        assert coordinator.returncode == 1, cluster.logs_tail()
        seen = last_global_step(cluster, "chief", 0)  # its last progress event, flushed as it failed
        resume_from = checkpoint_step(run_dir / "checkpoints")
        for task in (plan.task("ps", 0), plan.task("chief", 0)):  # each one's supervisor restarts it
            cluster.start_task(task)
        all_exited_zero(cluster, 120)
    print(f"the coordinator saw global step {seen} and failed {failed_after:.2f} s after the ps was killed; "
          f"resumed from checkpoint step {resume_from}")
    assert 100 <= resume_from <= seen
    assert f"restored {run_dir / 'checkpoints'}/ckpt-{resume_from} (global step {resume_from})" in \
        cluster.log("chief-0")
    # == steps, unless steps were in flight when a worker could not reach the restarted ps yet (the
    # coordinator then schedules again from the ps's counter, and a step that was still running adds to it)
    assert steps <= checkpoint_step(run_dir / "checkpoints") <= steps + 8
    assert run_processes(run_dir) == []
