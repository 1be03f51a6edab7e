"""In-graph replication on a real local TensorFlow cluster: ps tasks, worker servers and the one client,
each a real `python -m training.task` process started from a real plan's run.json (see
testkit/local_cluster.py). Nothing is faked: the only stand-in is that every "machine" is 127.0.0.1.

Each TF process costs seconds of CPU to start, so one run serves every check: a PS task restarts mid-run,
and what the run leaves behind is checked once it has finished.
"""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path
from statistics import mean
from typing import Any

import pytest

from testkit.local_cluster import LocalCluster, local_plan, running_cluster
from tests import requires
from tests.helpers.results import points_are_progress, task_runs
from tests.helpers.waiting import wait_for
from tests.integration.tf2_helpers import last_global_step

pytestmark = pytest.mark.integration
tf = requires.tensorflow()

EXIT_TIMEOUT = 90.0
PROGRESS_FIELDS = ("v", "t", "host", "kind", "job", "task", "local_step", "global_step", "examples", "loss",
                   "interval_s", "ps_bytes")


def finish(cluster: LocalCluster) -> dict[str, int | None]:
    codes = cluster.wait(EXIT_TIMEOUT)
    assert all(rc == 0 for rc in codes.values()), f"exit codes {codes}\n{cluster.logs_tail()}"
    return codes


def landed(cluster: LocalCluster) -> dict[str, str]:
    """`variable NAME landed on DEVICE` lines of the client's log (the runtime's real placement)."""
    return dict(re.findall(r"variable (\S+) landed on (\S+)", cluster.log("chief-0")))


def checkpoint_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".index") or ".data-" in p.name]


def check_progress_events(events: list[dict[str, Any]], steps: int, examples_per_step: int,
                          restored: list[int]) -> None:
    """`restored`: the global steps the client's session was recreated at (from a checkpoint)."""
    assert events, "the client wrote no progress events"
    for e in events:
        missing = [k for k in PROGRESS_FIELDS if k not in e]
        assert not missing, f"progress event lacks {missing}: {e}"
        assert (e["job"], e["task"]) == ("chief", 0)
    last = events[-1]
    assert last["global_step"] == steps
    assert last["examples"] == last["local_step"] * examples_per_step
    assert [e["local_step"] for e in events] == sorted(e["local_step"] for e in events)
    # the global step only goes up, but where a restore took it back to a checkpoint's step
    global_steps = [e["global_step"] for e in events]
    back = [b for a, b in pairwise(global_steps) if b < a]
    assert len(back) <= len(restored) and all(b >= min(restored) for b in back), (global_steps, restored)


def restart_ps_1_mid_run(cluster: LocalCluster) -> int:
    """SIGKILL ps-1 mid-run and start it again (what the supervisor does); the step of the latest checkpoint
    saved before the kill."""
    def chief_at_step_80() -> bool:
        assert cluster.procs["chief-0"].poll() is None, cluster.logs_tail()  # it must not end first
        return last_global_step(cluster, "chief", 0) >= 80

    wait_for(chief_at_step_80, 90, "the chief at global step 80", explain=cluster.logs_tail)
    latest = tf.train.latest_checkpoint(str(cluster.run_dir / "checkpoints"))
    assert latest is not None, cluster.log("chief-0")
    saved_step = int(tf.train.load_checkpoint(latest).get_tensor("global_step"))
    cluster.kill("ps-1")
    cluster.procs["ps-1"].wait(timeout=10)
    cluster.start_task(cluster.plan.task("ps", 1))
    return saved_step


def test_in_graph_client_input_trains_recovers_from_a_ps_restart_and_stops(tmp_path: Path) -> None:
    """The client trains with client input (it draws the big batch and splits it over the towers). Mid-run
    ps-1 is SIGKILLed and started again: the client's session fails, is recreated, restores the variables
    from its own (non-sharded) checkpoint, and training finishes; every task then exits cleanly."""
    steps = 240
    plan = local_plan("in-graph", ps=2, workers=2, training={
        "model": "mlp", "batch_size": 32, "steps": steps, "learning_rate": 0.2, "input": "client",
        "checkpoint_every_steps": 30, "summary_every_steps": 50, "progress_interval": 0.5,
    })
    with running_cluster(plan, tmp_path / "run") as cluster:
        saved_step = restart_ps_1_mid_run(cluster)
        finish(cluster)
        log = cluster.log("chief-0")

        # the restart really hit the client: its session was recreated from a checkpoint at least as recent
        # as the last one before the kill (not initialised again)
        recreated = r"session recreated \(#\d+\) after a failure at global step (\d+)"
        restored = [int(n) for n in re.findall(recreated, log)]
        assert restored and min(restored) >= saved_step, log[-3000:]

        # the global step reached its target and the loss fell (mlp learns its teacher)
        events = cluster.events("chief", 0)
        check_progress_events(events, steps, examples_per_step=64, restored=restored)
        losses = [e["loss"] for e in events]
        assert mean(losses[-2:]) < 0.8 * mean(losses[:2]), losses

        # the variables were spread over both PS tasks, and traffic to both was accounted
        where = landed(cluster)
        assert where, log
        ps_used = {m.group(0) for d in where.values() if (m := re.search(r"/job:ps/(replica:0/)?task:\d", d))}
        assert len(ps_used) == 2, where
        for e in events[1:]:
            assert set(e["ps_bytes"]) == {"ps-0", "ps-1"}
            assert all(v["pulled"] > 0 and v["pushed"] > 0 for v in e["ps_bytes"].values()), e["ps_bytes"]
        # client input: each tower's slice crossed the network every step (32 x 32 float32 + 32 int32)
        per_step = 32 * 32 * 4 + 32 * 4
        for e in events:
            assert e["input_bytes"] == {"worker-0": per_step * e["steps"], "worker-1": per_step * e["steps"]}
        assert set(events[-1]["towers"]) == {"worker-0", "worker-1"}
        # the client's TensorBoard run: its progress events' numbers, and each tower's compute time
        runs = task_runs(cluster.run_dir / "summaries")
        assert set(runs) == {"chief:0"} and points_are_progress(runs["chief:0"]["loss"], events)
        assert {"towers/worker:0/compute_s", "towers/worker:1/compute_s",
                "ps_traffic/ps:0/pulled_bytes_per_s", "ps_traffic/ps:1/pushed_bytes_per_s",
                "examples_per_s"} <= set(runs["chief:0"])

        # towers landed on their workers
        assert re.search(r"tower worker-0 landed on /job:worker/replica:0/task:0/device:CPU:0", log), log
        assert re.search(r"tower worker-1 landed on /job:worker/replica:0/task:1/device:CPU:0", log), log

        # only the client checkpointed: non-sharded checkpoints under the run's checkpoint_dir, the last one
        # at the end
        run_dir = cluster.run_dir
        files = checkpoint_files(run_dir)
        assert files and all(p.parent == run_dir / "checkpoints" for p in files), files
        assert all("-of-00001" in p.name for p in files if ".data-" in p.name), files
        latest = tf.train.latest_checkpoint(str(run_dir / "checkpoints"))
        assert latest is not None and latest.endswith(f"-{steps}")
        assert tf.train.load_checkpoint(latest).get_tensor("global_step") == steps

        # workers and ps tasks wrote no progress events: in in-graph mode they only serve
        for job, n in (("worker", 2), ("ps", 2)):
            for i in range(n):
                assert cluster.events(job, i) == []
