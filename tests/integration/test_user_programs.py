"""The user's own programs, first-class, over the real sshd with real TensorFlow (issue: your own training
program). An unchanged TF1-style between-graph script whose ps tasks block in `server.join()` forever and
whose workers print progress in their own words, read through `progress_pattern`; a program that uses the
public `tfcluster_report` API; a Keras program with the callback. Each shows live rates in the dashboard's
JSON, and the first run ends by itself (success policy) with no process left anywhere.
"""

from __future__ import annotations

import re
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
    until_rates,
)

pytestmark = pytest.mark.integration
requires.tensorflow()

# Written in the style of the public TF1 distributed examples: flags, a ps that joins forever, workers that
# print their own progress line. Nothing of tfcluster in it.
CLASSIC_PS_JOINS = '''\
import argparse, os, time
import tensorflow as tf
tf.compat.v1.disable_eager_execution()
p = argparse.ArgumentParser()
p.add_argument("--job_name"); p.add_argument("--task_index", type=int)
p.add_argument("--ps_hosts"); p.add_argument("--worker_hosts"); p.add_argument("--steps", type=int)
p.add_argument("--stop_file")  # train until it exists (or --steps)
a = p.parse_args()
cluster = tf.train.ClusterSpec({"ps": a.ps_hosts.split(","), "worker": a.worker_hosts.split(",")})
server = tf.distribute.Server(cluster, job_name=a.job_name, task_index=a.task_index)
if a.job_name == "ps":
    server.join()  # forever: the run must end it
v1 = tf.compat.v1
with v1.device(v1.train.replica_device_setter(cluster=cluster, worker_device=f"/job:worker/task:{a.task_index}")):
    gs = v1.train.get_or_create_global_step()
    w = v1.get_variable("w", [16, 1])
    x = v1.random.normal([32, 16])
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0))
    train = v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=gs)
with v1.train.MonitoredTrainingSession(master=server.target, is_chief=a.task_index == 0) as sess:
    for i in range(a.steps):
        _, g, l = sess.run([train, gs, loss])
        time.sleep(0.02)  # paces the steps: the run lasts while the test looks at it
        if i % 10 == 0:
            print(f"worker {a.task_index}: step {g}, loss {l:.4f}", flush=True)
            if a.stop_file and os.path.exists(a.stop_file):
                break
print(f"worker {a.task_index}: done", flush=True)
'''

REPORT_LOOP = '''\
import math, os, sys, time
from tfcluster_report import report
step = 0
while not os.path.exists(sys.argv[1]):  # trains until the test has seen what it looks for
    step += 1
    time.sleep(0.03)  # a training step
    report(step=step, loss=1.0 / math.sqrt(step), examples=32)
'''

KERAS_FIT = '''\
import os, sys
import numpy as np
import keras
from tfcluster_report import TfclusterCallback
x = np.random.rand(4096, 16).astype("float32")
y = (x.sum(axis=1, keepdims=True) > 8).astype("float32")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
model.compile("sgd", "mse")
enough = keras.callbacks.LambdaCallback(  # trains until the test has seen what it looks for
    on_epoch_end=lambda epoch, logs: setattr(model, "stop_training", os.path.exists(sys.argv[1])))
model.fit(x, y, batch_size=16, epochs=100000, verbose=0, callbacks=[TfclusterCallback(batch_size=16), enough])
'''


def test_an_unchanged_classic_script_shows_rates_and_its_run_ends_by_itself(
        machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    (tmp_path / "train.py").write_text(CLASSIC_PS_JOINS)
    enough = tmp_path / "enough"  # the workers train until it exists: as long as it takes to see both rates
    command = ("{python} train.py --job_name {job} --task_index {task} --ps_hosts {ps_hosts} "
               f"--worker_hosts {{worker_hosts}} --steps 100000 --stop_file {enough}")
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps"], ["worker"], ["worker"]], training={
        "command": command, "sync": ["train.py"], "success": "all-workers",
        "progress_pattern": r"step (?P<global_step>\d+), loss (?P<loss>[\d.]+)"})
    res = cli(state_dir, "start", str(hosts))
    assert res.returncode == 0, res.stderr
    run_id = started_run_id(res.stdout)
    tasks = until_rates(state_dir, run_id, {"worker:0", "worker:1"})
    assert tasks["ps:0"]["state"] == "running"  # a server: alive, no progress expected of it
    assert all(tasks[w]["loss"] is not None and tasks[w]["global_step"] for w in ("worker:0", "worker:1"))
    enough.touch()

    def ended() -> dict[str, Any] | None:
        _, st = status_json(state_dir, run_id)
        return st if st["state"] in ("finished", "failed") and all(t["final"] for t in st["tasks"]) else None

    st = wait_for(ended, 240, "the run to end by itself", interval=1.0)
    assert st["state"] == "finished", st
    by_name = {t["name"]: t for t in st["tasks"]}
    assert by_name["worker:0"]["exit_code"] == by_name["worker:1"]["exit_code"] == 0
    assert by_name["ps:0"]["stopped_by"] == "run" and not by_name["ps:0"]["failed"]
    last_worker_exit = max(by_name[w]["updated_at"] for w in ("worker:0", "worker:1"))
    assert by_name["ps:0"]["updated_at"] - last_worker_exit < 30  # ended within 30 s of the last worker
    wait_for(lambda: not run_processes(run_id), 30, "no process of the run left on any host")
    assert re.search(r"finished", cli(state_dir, "ls").stdout)


@pytest.mark.parametrize(("program", "source"), [("report_loop.py", REPORT_LOOP), ("keras_fit.py", KERAS_FIT)])
def test_programs_that_report_themselves_show_rates(machines: Machines, tmp_path: Path, state_dir: Path,
                                                    program: str, source: str) -> None:
    (tmp_path / program).write_text(source)
    enough = tmp_path / "enough"  # the program trains until it exists: as long as the rate takes to be seen
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["worker"]], mode="multi-worker-mirrored",
                                training={"command": f"{{python}} {program} {enough}", "sync": [program],
                                          "env": {"TF_CPP_MIN_LOG_LEVEL": "3"}})
    res = cli(state_dir, "start", str(hosts))
    assert res.returncode == 0, res.stderr
    run_id = started_run_id(res.stdout)
    tasks = until_rates(state_dir, run_id, {"worker:0"})
    assert tasks["worker:0"]["loss"] is not None and not tasks["worker:0"]["no_progress_reported"]
    enough.touch()
    wait_for(lambda: status_json(state_dir, run_id)[1]["state"] == "finished", 240, "the run to finish")
    wait_for(lambda: not run_processes(run_id), 30, "no process of the run left")
