"""TensorFlow 2's own strategies as modes, over the real sshd with real TensorFlow, through the CLI: the
built-in `mlp` on 2 workers (plus 1 ps for parameter-server-strategy) reaches its steps, checkpoints and
leaves no process; the dashboard's JSON shows every worker's steps/s > 0 while it trains; killing a worker
makes multi-worker-mirrored restart its whole group (which resumes from the checkpoint) while
parameter-server-strategy goes on without it; and a user's own MultiWorkerMirroredStrategy program, which
only reads TF_CONFIG, runs to completion on two worker-only hosts.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from orchestrator.monitor.collect import Collector
from orchestrator.monitor.state_json import state_json
from orchestrator.run import records
from testkit.sshd import Machines
from tests import requires
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import (
    cli,
    run_processes,
    started_run_id,
    status_json,
)
from tests.integration.test_user_programs import dash_json, until_rates

pytestmark = pytest.mark.integration
requires.tensorflow()

TRAINING = {"model": "mlp", "batch_size": 32, "progress_interval": 0.5, "checkpoint_every_steps": 200,
            "checkpoint_every_secs": 600.0, "success": "all-workers"}

USER_MWMS = '''\
import json, os
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()  # reads TF_CONFIG
with strategy.scope():
    w = tf.Variable(tf.zeros([8, 1]))

@tf.function
def step(x):
    def replica(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0))
        grad = tf.distribute.get_replica_context().all_reduce("mean", tape.gradient(loss, w))
        w.assign_sub(0.05 * grad)
        return loss
    return strategy.run(replica, args=(x,))

for i in range(60):
    loss = step(tf.random.normal([16, 8]))
print("done", json.loads(os.environ["TF_CONFIG"])["task"], float(loss), flush=True)
'''






def _start(state_dir: Path, hosts: Path) -> str:
    res = cli(state_dir, "start", str(hosts), "--timeout", "120")
    assert res.returncode == 0, res.stdout + res.stderr
    return started_run_id(res.stdout)


def _ended(state_dir: Path, run_id: str, timeout: float = 300) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        _, st = status_json(state_dir, run_id)
        return st if st["state"] in ("finished", "failed") and all(t["final"] for t in st["tasks"]) else None

    st = wait_for(ended, timeout, f"run {run_id} to end", interval=1.0)
    wait_for(lambda: not run_processes(run_id), 30, "no process of the run left on any host")
    return st


def _supervisor_events(run_id: str, host: str) -> list[dict[str, Any]]:
    path = Path(records.load(run_id).host(host).run_dir, "events", f"supervisor-{host}.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_multi_worker_mirrored_trains_restarts_its_group_and_finishes(
        machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["worker"], ["worker"]],
                                mode="multi-worker-mirrored", training={**TRAINING, "steps": 3000})
    run_id = _start(state_dir, hosts)
    tasks = until_rates(state_dir, run_id, {"worker:0", "worker:1"})
    assert tasks["worker:0"]["global_step"] and tasks["worker:0"]["loss"] is not None

    # The kernel's counters need two samples apart: the traffic measured is the live dashboard's (its agents').
    collector = Collector.for_record(records.load(run_id), 0.5).start()
    try:
        def allreduce_measured() -> list[dict[str, Any]] | None:
            rows = state_json(collector.poll())["allreduce"]
            ok = {r["name"] for r in rows if (r["measured_in_Bps"] or 0) > 0 and (r["measured_out_Bps"] or 0) > 0}
            return rows if ok == {"worker:0", "worker:1"} else None

        wait_for(allreduce_measured, 60, "each worker's all-reduce traffic measured", interval=0.5)
    finally:
        collector.close()
    wait_for(lambda: any(Path(records.load(run_id).host("m0").run_dir, "checkpoints").glob("*.index")), 120,
             "a first checkpoint")
    victim = next(t for t in status_json(state_dir, run_id)[1]["tasks"] if t["name"] == "worker:1")
    os.kill(victim["pid"], signal.SIGKILL)
    st = _ended(state_dir, run_id)
    assert st["state"] == "finished", st
    by_name = {t["name"]: t for t in st["tasks"]}
    assert by_name["worker:0"]["restarts"] >= 1 and by_name["worker:1"]["restarts"] >= 1  # the whole group
    assert any(e["state"] == "restarting" and e.get("restart_reason") == "group" for e in _supervisor_events(run_id, "m0"))
    log = cli(state_dir, "logs", run_id, "worker:0").stdout
    assert "restored" in log.lower() or "restoring" in log.lower() or "resum" in log.lower(), log[-3000:]
    assert any(Path(records.load(run_id).host("m0").run_dir, "checkpoints").glob("*.index"))


def test_parameter_server_strategy_trains_and_goes_on_without_a_dead_worker(
        machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    # 6000 steps: on a loaded machine both workers were first seen training in one read at step ~1750 of 3000,
    # and a kill in the run's last moments may reach worker:1's supervisor after the run's end (not restarted).
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps"], ["chief", "worker"], ["worker"]],
                                mode="parameter-server-strategy", training={**TRAINING, "steps": 6000})
    run_id = _start(state_dir, hosts)
    # Both workers train in one read, so the kill lands mid-run (each seen at a different read, worker:1 was
    # once first seen as the run ended: killed after its supervisor had heard of the end, never restarted).
    at_kill = until_rates(state_dir, run_id, {"worker:0", "worker:1"}, in_one_read=True)
    os.kill(at_kill["worker:1"]["pid"], signal.SIGKILL)
    # The other one keeps training: its own steps go on past where they were (read whether it still runs or
    # the run has already reached its last step: a wait for it `running` raced the run's end)
    before = (at_kill["worker:0"]["local_step"] or 0) + 20

    def worker0_stepped_on() -> bool:
        shown = {t["name"]: t for t in dash_json(state_dir, run_id)["tasks"]}["worker:0"]
        return (shown["local_step"] or 0) > before

    wait_for(worker0_stepped_on, 150, "worker:0 to step on after worker:1 was killed", interval=1.0)
    st = _ended(state_dir, run_id)
    assert st["state"] == "finished", st
    by_name = {t["name"]: t for t in st["tasks"]}
    killed_at = {n: t["global_step"] for n, t in at_kill.items()}
    assert by_name["chief:0"]["exit_code"] == 0 and by_name["worker:1"]["restarts"] >= 1, (killed_at, st["tasks"])
    assert by_name["chief:0"]["global_step"] >= 6000
    assert any(Path(records.load(run_id).host("m1").run_dir, "checkpoints").glob("*.index"))


def test_a_users_own_mirrored_program_runs_on_worker_only_hosts(
        machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    (tmp_path / "mwms.py").write_text(USER_MWMS)
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["worker"], ["worker"]],
                                mode="multi-worker-mirrored",
                                training={"command": "{python} mwms.py", "sync": ["mwms.py"], "success": "all-workers"})
    run_id = _start(state_dir, hosts)
    st = _ended(state_dir, run_id)
    assert st["state"] == "finished", st
    out = cli(state_dir, "logs", run_id).stdout
    assert "done {'type': 'worker', 'index': 0}" in out and "done {'type': 'worker', 'index': 1}" in out, out
