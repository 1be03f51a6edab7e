"""A user's own MultiWorkerMirroredStrategy program, which only reads TF_CONFIG, runs to completion on two
worker-only hosts over the real sshd with real TensorFlow, and its run ends by itself with no process left.

The built-in TF2 modes' checks read runs that serve several at once: live rates, the all-reduce traffic,
TensorBoard and `pull` in tests/integration/test_tensorboard_sshd.py (multi-worker-mirrored); a killed
worker (the whole mirrored group restarts and resumes from its checkpoint; parameter-server-strategy goes
on without it), the chief's faults in tests/faults/test_mode_faults.py; each mode running to `finished`
with live rates in tests/integration/test_slurm_lifecycle.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testkit.sshd import Machines
from tests import requires
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import (
    cli,
    run_processes,
    started_run_id,
    status_json,
)

pytestmark = pytest.mark.integration
requires.tensorflow()

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
