"""Between-graph replication on a real local TensorFlow cluster: every ps, worker and chief task is a real
`python -m training.task` process started from a real plan's run.json (testkit/local_cluster.py).
Nothing is faked; the only stand-in is that every "machine" is 127.0.0.1 and shares one run directory.

Each TF process costs seconds of CPU to start, so each run serves several checks: one async run (a worker
killed mid-run, then the whole cluster started again on its run dir), one sync run on a GPU plan, one run
whose PS restarts mid-run (sharded checkpoints in a shared directory).
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
from pathlib import Path
from statistics import mean
from typing import Any

import pytest

from orchestrator.config.schema import Config
from orchestrator.plan.from_file import plan_config
from orchestrator.plan.model import ClusterPlan
from orchestrator.run.local_ports import free_port_block
from testkit.local_cluster import LocalCluster, local_plan, running_cluster
from tests import requires
from tests.helpers.local_tf import cluster_holding_back
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.integration
tf = requires.tensorflow()

EXIT_TIMEOUT = 120.0
PROGRESS_FIELDS = ("v", "t", "host", "kind", "job", "task", "local_step", "global_step", "examples", "loss",
                   "interval_s", "ps_bytes")


def chief_plan(training: dict[str, Any], workers: int = 1) -> ClusterPlan:
    """2 ps hosts, a host with the `chief` role and a worker host: a `chief` job plus `workers` workers."""
    hosts: list[dict[str, Any]] = [
        {"name": f"ps{i}", "address": "127.0.0.1", "roles": ["ps"], "transport": "local"} for i in range(2)
    ]
    hosts.append({"name": "boss", "address": "127.0.0.1", "roles": ["chief"], "transport": "local"})
    hosts.append({"name": "wk", "address": "127.0.0.1", "roles": ["worker"], "workers": workers,
                  "transport": "local"})
    config = Config.model_validate({
        "cluster": {"name": "bg", "mode": "between-graph", "base_port": free_port_block(3 + workers)},
        "remote": {"python": sys.executable},
        "hosts": hosts,
        "training": training,
    })
    return plan_config(config)


def finish(cluster: LocalCluster, timeout: float = EXIT_TIMEOUT) -> None:
    codes = cluster.wait(timeout)
    assert all(rc == 0 for rc in codes.values()), f"exit codes {codes}\n{cluster.logs_tail()}"


def training_tasks(plan: ClusterPlan) -> list[tuple[str, int]]:
    return [(t.job, t.index) for t in plan.tasks if t.job in ("chief", "worker")]


def check_progress(cluster: LocalCluster, job: str, index: int) -> list[dict[str, Any]]:
    events = cluster.events(job, index)
    assert events, f"{job}:{index} wrote no progress events\n{cluster.logs_tail()}"
    for e in events:
        missing = [k for k in PROGRESS_FIELDS if k not in e]
        assert not missing, f"progress event lacks {missing}: {e}"
        assert (e["job"], e["task"]) == (job, index)
        assert set(e["ps_bytes"]) <= {"ps-0", "ps-1"}
    steps = [e["local_step"] for e in events]
    assert steps == sorted(steps)
    assert events[-1]["examples"] == events[-1]["local_step"] * cluster.plan.training.batch_size
    return events


def landed(cluster: LocalCluster, name: str) -> dict[str, str]:
    """`variable NAME landed on DEVICE` lines of a task's log: the runtime's real placement."""
    return dict(re.findall(r"variable (\S+) landed on (\S+)", cluster.log(name)))


def checkpoint_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".index") or ".data-" in p.name]


def test_async_run_survives_a_killed_worker_and_a_fresh_cluster_resumes_it(tmp_path: Path) -> None:
    """One asynchronous run of a chief and two workers, in stages:
    1. all three train; worker 1 is SIGKILLed mid-run, the chief and worker 0 carry on to the last step and
       exit cleanly; the ps tasks keep serving (worker 1 never said it was done) until a SIGTERM ends them;
    2. what the run left: valid progress from every task, a falling loss, the variables spread over both PS
       tasks, the chief's whole (non-sharded) checkpoints and the summaries;
    3. a fresh cluster on the same run dir resumes from the chief's checkpoint.
    Stage 1's trainers are paced (each step then sleeps three times its own duration): the run outlasts the
    kill by seconds without burning both cores."""
    steps = 400
    training = {"model": "mlp", "batch_size": 32, "steps": steps, "learning_rate": 0.1,
                "checkpoint_every_steps": 100, "summary_every_steps": 50, "progress_interval": 0.3,
                "slowdown": {"chief:0": 4.0, "worker:0": 4.0, "worker:1": 4.0}}
    plan = chief_plan(training, workers=2)
    with cluster_holding_back(plan, tmp_path / "run", "chief-0") as cluster:
        # The chief starts once both workers have built their graph and poll the ps tasks for its
        # initialisation (every second): worker 1 then trains from the chief's first steps on, not after
        # the others have run to the end while it was still starting.
        wait_for(lambda: all("bytes per ps task" in cluster.log(f"worker-{w}") for w in (0, 1)), 90,
                 "both workers to wait for the chief", explain=cluster.logs_tail)
        cluster.start_task(plan.task("chief", 0))
        kill_worker_1_mid_run(cluster, steps)
        final_step = check_async_results(cluster, steps)
    resume_on_a_fresh_cluster(plan, training, final_step, tmp_path / "run")


def kill_worker_1_mid_run(cluster: LocalCluster, steps: int) -> None:
    # wait until every training task is really training (each has reported progress), then SIGKILL worker 1
    wait_for(lambda: all(cluster.events(*t) for t in training_tasks(cluster.plan)), 90,
             "every training task to train", explain=cluster.logs_tail)
    cluster.kill("worker-1")
    cluster.procs["worker-1"].wait(10)
    survivors = [("chief", 0), ("worker", 0)]
    at_kill = max(e["global_step"] for t in survivors for e in cluster.events(*t))
    assert at_kill < steps, "the run ended before the kill: make it longer"

    # the chief and worker 0 carry on to the last step and exit cleanly
    for name in ("chief-0", "worker-0"):
        with contextlib.suppress(subprocess.TimeoutExpired):  # then poll() is None: the assert shows the logs
            cluster.procs[name].wait(EXIT_TIMEOUT)
        assert cluster.procs[name].poll() == 0, f"{name}\n{cluster.logs_tail()}"
    for task in survivors:
        assert check_progress(cluster, *task)[-1]["global_step"] > at_kill
    assert max(e["global_step"] for t in survivors for e in cluster.events(*t)) >= steps
    # the ps tasks keep serving: worker 1 never said it was done (the supervisor restarts it or stops
    # them); SIGTERM, as the supervisor's stop sends it, ends a ps task cleanly
    assert all(cluster.procs[f"ps-{i}"].poll() is None for i in range(2))
    for i in range(2):
        cluster.kill(f"ps-{i}", signal.SIGTERM)
        assert cluster.procs[f"ps-{i}"].wait(15) == 0, cluster.log(f"ps-{i}")
        assert "received SIGTERM, stopping" in cluster.log(f"ps-{i}")


def check_async_results(cluster: LocalCluster, steps: int) -> int:
    """Checks what the run left behind; returns the global step of its final checkpoint."""
    run_dir = cluster.run_dir
    # every training task reported valid progress (worker 1 until it was killed); a ps task trains nothing
    events = {task: check_progress(cluster, *task) for task in training_tasks(cluster.plan)}
    assert all(cluster.events("ps", i) == [] for i in range(2))

    # the loss fell (mlp learns its teacher network)
    losses = [e["loss"] for e in events[("chief", 0)]]
    assert mean(losses[-2:]) < 0.75 * mean(losses[:2]), losses

    # variables spread over both PS tasks (as the runtime placed them), and traffic to both accounted
    where = landed(cluster, "chief-0")
    assert {"layer0/kernel", "layer1/kernel", "layer2/kernel", "global_step"} <= set(where), where
    ps_used = {m.group(1) for d in where.values() if (m := re.search(r"/job:ps/replica:0/task:(\d)", d))}
    assert ps_used == {"0", "1"}, where
    for w in (0, 1):
        assert landed(cluster, f"worker-{w}") == where  # every client agrees on the placement
    assert re.search(r"tower chief:0 landed on /job:chief/replica:0/task:0/device:CPU:0",
                     cluster.log("chief-0"))
    for evs in events.values():
        moving = [e for e in evs if e["steps"] > 0]
        assert moving and all(set(e["ps_bytes"]) == {"ps-0", "ps-1"} for e in moving)
        assert all(v["pulled"] > 0 and v["pushed"] > 0 for e in moving for v in e["ps_bytes"].values())

    # only the chief checkpointed: whole (non-sharded, one writer) checkpoints under its checkpoint_dir
    files = checkpoint_files(run_dir)
    assert files and all(p.parent == run_dir / "checkpoints" for p in files), files
    assert all("-of-00001" in p.name for p in files if ".data-" in p.name), files
    # TF's own summaries beside the chief's checkpoints; tfcluster's, one TensorBoard run per task
    summaries = list(run_dir.rglob("events.out.tfevents.*"))
    assert summaries and all(p.parent == run_dir / "checkpoints" or p.parent.parent == run_dir / "summaries"
                             for p in summaries), summaries
    latest = tf.train.latest_checkpoint(str(run_dir / "checkpoints"))
    assert latest is not None
    final_step = int(tf.train.load_checkpoint(latest).get_tensor("global_step"))
    assert final_step >= steps  # the final checkpoint, written at the end
    saved = {name for name, _ in tf.train.list_variables(latest)}
    assert {"layer0/kernel", "layer1/kernel", "layer2/kernel", "global_step"} <= saved
    return final_step


def resume_on_a_fresh_cluster(plan: ClusterPlan, training: dict[str, Any], final_step: int,
                              run_dir: Path) -> None:
    """A fresh cluster on the same run dir (every PS restarted, empty; the chief and one worker): the chief
    restores the whole checkpoint it wrote, and the worker joins at the restored global step instead of 0.
    Unpaced: nothing here waits for anything but the end."""
    more = {k: v for k, v in training.items() if k != "slowdown"} | {"steps": final_step + 200}
    plan2 = plan_config(Config.model_validate(_config_dict(plan, more, workers=1)))
    (run_dir / "events").rename(run_dir / "events-first-run")
    with running_cluster(plan2, run_dir) as cluster2:
        finish(cluster2)
        for task in training_tasks(plan2):
            evs = check_progress(cluster2, *task)
            assert evs[0]["global_step"] > final_step, (task, evs[0])  # restored, not started from 0
            assert evs[-1]["local_step"] < 200 + 50
        reached = max(e["global_step"] for t in training_tasks(plan2) for e in cluster2.events(*t))
        assert reached >= final_step + 200


def _config_dict(plan: ClusterPlan, training: dict[str, Any], workers: int) -> dict[str, Any]:
    """A Config of the hosts behind `plan` (same ports from the same base port), with `workers` workers on
    its worker host and other training settings."""
    hosts: list[dict[str, Any]] = []
    for h in plan.hosts:
        entry: dict[str, Any] = {"name": h.name, "address": h.address, "roles": list(h.roles),
                                 "transport": "local"}
        if "worker" in h.roles:
            entry["workers"] = workers
        hosts.append(entry)
    base_port = min(t.port for t in plan.tasks)
    return {"cluster": {"name": plan.cluster_name, "mode": plan.mode, "base_port": base_port},
            "remote": {"python": sys.executable}, "hosts": hosts, "training": training}


def test_sync_replicas_end_cleanly(tmp_path: Path) -> None:
    """Two synchronous workers, each tower on its own worker's CPU, end cleanly in lock step. (This ran on a
    GPU plan without GPUs, soft placement moving the towers to the CPU; such a task now fails before it
    trains: tests/integration/test_gpu_check_sshd.py.)"""
    steps = 60
    plan = local_plan("between-graph", ps=2, workers=2, training={
        "model": "wide", "model_args": {"params": 100_000}, "batch_size": 16, "steps": steps,
        "sync_replicas": True, "progress_interval": 0.3, "checkpoint_every_steps": 50})
    with running_cluster(plan, tmp_path / "run") as cluster:
        finish(cluster)
        for w in (0, 1):
            events = check_progress(cluster, "worker", w)
            assert events[-1]["global_step"] == steps
            # lock step: one update per step, every replica took part in each of them
            assert events[-1]["local_step"] == steps
            log = cluster.log(f"worker-{w}")
            assert f"tower worker:{w} (loss) placed on /job:worker/task:{w}/device:CPU:0" in log
            assert f"tower worker:{w} landed on /job:worker/replica:0/task:{w}/device:CPU:0" in log
        assert "2 of 2 replicas' gradients per update" in cluster.log("worker-0")
        latest = tf.train.latest_checkpoint(str(cluster.run_dir / "checkpoints"))
        assert latest is not None and latest.endswith(f"-{steps}")
        # wide's four equal shards: the greedy placement gives each PS two (bias and global step are tiny)
        m = re.search(r"bytes per ps task: \{'ps-0': (\d+), 'ps-1': (\d+)\}", cluster.log("worker-0"))
        assert m is not None and abs(int(m.group(1)) - int(m.group(2))) <= 64, m


def test_ps_restart_mid_run_restores_the_shared_sharded_checkpoint(tmp_path: Path) -> None:
    """shared_checkpoint_dir = true: every PS writes its own shard into one (absolute, shared) directory.
    A PS killed mid-run and started again comes back empty; the chief restores the latest checkpoint.
    Unpaced: a paced worker would also sleep (factor - 1) x the step that waited out the PS restart."""
    steps = 400
    shared = tmp_path / "shared-ckpt"
    plan = local_plan("between-graph", ps=2, workers=2, training={
        "model": "mlp", "batch_size": 16, "steps": steps, "progress_interval": 0.3,
        "checkpoint_dir": str(shared), "shared_checkpoint_dir": True, "checkpoint_every_steps": 50,
    })
    with running_cluster(plan, tmp_path / "run") as cluster:
        wait_for(lambda: tf.train.latest_checkpoint(str(shared)) is not None
                 and any(e["global_step"] >= 100 for e in cluster.events("worker", 0)), 120, "a checkpoint",
                 explain=cluster.logs_tail)
        cluster.kill("ps-1")
        cluster.procs["ps-1"].wait(10)
        latest = tf.train.latest_checkpoint(str(shared))
        saved_step = int(tf.train.load_checkpoint(latest).get_tensor("global_step"))
        assert saved_step < steps, "the run ended before the kill: make it longer"
        cluster.start_task(plan.task("ps", 1))
        finish(cluster)

        # the chief's session failed over and resumed from a checkpoint, not from scratch
        log = cluster.log("worker-0")
        resumed = [int(n) for n in re.findall(r"session re-created .* at global step (\d+)", log)]
        assert resumed and resumed[0] >= saved_step, log
        # Asynchronous: the run reached its last step; a worker whose last update came just before another's
        # final one stops there (StopAtStepHook reads the global step after its own update).
        last = [check_progress(cluster, "worker", w)[-1]["global_step"] for w in (0, 1)]
        assert max(last) >= steps and min(last) > saved_step, (last, saved_step)
        # sharded: one data file per PS task, all in the shared directory
        latest = tf.train.latest_checkpoint(str(shared))
        assert latest is not None
        data = sorted(p.name for p in shared.glob(Path(latest).name + ".data-*"))
        assert data == [f"{Path(latest).name}.data-0000{i}-of-00002" for i in range(2)], data
        assert checkpoint_files(tmp_path / "run") == []  # nothing under the run's own checkpoint dir
