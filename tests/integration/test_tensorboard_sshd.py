"""`tfcluster tensorboard` and `tfcluster pull` over real sshd machines with real TensorFlow runs, through the
CLI: during a between-graph run and a multi-worker-mirrored run, the TensorBoard it serves returns each
training task's loss through TensorBoard's HTTP API (`/data/plugin/scalars/...`), equal to the loss `dash
--once --json` showed at that step, and `dash --once --json` names its URL (and, for multi-worker-mirrored,
the live dashboard's agents measure each worker's all-reduce traffic); after `stop` it still serves them;
Ctrl-C (SIGINT) ends it with no TensorBoard, no file sender and nothing of the run left running; `pull` brings
back a checkpoint that TensorFlow restores (a Saver for between-graph, a tf.train.Checkpoint of the trainer's
own objects for multi-worker-mirrored), and a second pull copies nothing again.
"""

from __future__ import annotations

import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.monitor.collect import Collector
from orchestrator.monitor.state_json import state_json
from orchestrator.results.board_state import find_open
from orchestrator.run import records
from testkit.sshd import Machines
from tests import requires
from tests.helpers.procs import wait_gone
from tests.helpers.results import file_senders, scalars
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import (
    REPO,
    cli,
    cli_process,
    dash_json,
    run_processes,
    started_run_id,
    until_rates,
)

pytestmark = pytest.mark.integration
requires.tensorflow()
requires.tensorboard()

TRAINING = {"model": "mlp", "batch_size": 32, "steps": 1_000_000, "progress_interval": 0.5,
            "summary_every_steps": 1, "checkpoint_every_steps": 50, "checkpoint_every_secs": 600.0}
# The trainers paced (each step then sleeps 3x its own time) while the test reads the run: they do not burn
# both cores.
PACED = {"worker:0": 4.0, "worker:1": 4.0}

# The variables of the newest checkpoint, in the graph of the newest meta graph the Saver wrote (a stop
# between its update of the `checkpoint` file and its meta graph leaves the newest without one: TF's order).
RESTORE_SAVER = """
import glob, sys, tensorflow as tf
latest = tf.train.latest_checkpoint(sys.argv[1])
assert latest.startswith(sys.argv[1]), latest  # the copy restores on its own, not through the host's path
meta = max(glob.glob(sys.argv[1] + "/*.meta"), key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0]))
with tf.Graph().as_default():
    saver = tf.compat.v1.train.import_meta_graph(meta, clear_devices=True)
    with tf.compat.v1.Session() as sess:
        saver.restore(sess, latest)
        print(int(sess.run(tf.compat.v1.train.get_global_step())))
"""

RESTORE_CHECKPOINT = """
import sys, tensorflow as tf
from training.tf2.models import get_tf2_model
from training.tf2.optimizer import PlainOptimizer
model, optimizer = get_tf2_model("mlp", {}), PlainOptimizer("sgd", 0.05)
model.build(lambda shape, initial: tf.Variable(initial, name=shape.name), 0)
optimizer.build(tf.distribute.get_strategy(), model.weights)
step = tf.Variable(0, dtype=tf.int64)
checkpoint = tf.train.Checkpoint(step=step, model=model, optimizer=optimizer)
latest = tf.train.latest_checkpoint(sys.argv[1])
assert latest.startswith(sys.argv[1]), latest  # the copy restores on its own, not through the host's path
checkpoint.restore(latest).assert_existing_objects_matched()
print(int(step.numpy()))
"""


def read_line_matching(proc: subprocess.Popen[str], text: str, timeout: float) -> str:
    """The first line of the process's stdout that contains `text`."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.5)[0]:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if text in line:
                return line
    raise AssertionError(f"no line with {text!r} from the command; it said: {''.join(seen)}")


def tensorboard_matches_dashboard(state_dir: Path, run_id: str, url: str, tasks: set[str]) -> dict[str, Any]:
    """Once the dashboard's loss of every task appears in TensorBoard at that task's step: the dashboard JSON."""
    def matched() -> dict[str, Any] | None:
        shown = dash_json(state_dir, run_id)
        by_name = {t["name"]: t for t in shown["tasks"]}
        for name in tasks:
            step, loss = by_name[name]["global_step"], by_name[name]["loss"]
            points = dict(scalars(url, name, "loss")) if step is not None and loss is not None else {}
            if step not in points or points[step] != pytest.approx(loss, rel=1e-5):
                return None
        return shown

    shown: dict[str, Any] = wait_for(matched, 90, f"TensorBoard to show the dashboard's loss of {sorted(tasks)}", interval=1.0)
    return shown


def allreduce_measured(run_id: str, trainers: set[str]) -> None:
    """The live dashboard's agents measure each worker's all-reduce traffic (the kernel's counters need two
    samples apart: not one read's)."""
    collector = Collector.for_record(records.load(run_id), 0.5).start()
    try:
        def measured() -> bool:
            rows = state_json(collector.poll())["allreduce"]
            return {r["name"] for r in rows if (r["measured_in_Bps"] or 0) > 0 and (r["measured_out_Bps"] or 0) > 0} \
                == trainers

        wait_for(measured, 60, "each worker's all-reduce traffic measured", interval=0.5)
    finally:
        collector.close()


def restored_step(script: str, checkpoints: Path) -> int:
    res = subprocess.run([sys.executable, "-c", script, str(checkpoints)], cwd=REPO, capture_output=True, text=True,
                         timeout=120, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    return int(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("mode", "roles", "trainers", "restore"), [
    pytest.param("between-graph", [["ps"], ["worker"], ["worker"]], {"worker:0", "worker:1"}, RESTORE_SAVER,
                 id="between-graph"),
    pytest.param("multi-worker-mirrored", [["worker"], ["worker"]], {"worker:0", "worker:1"}, RESTORE_CHECKPOINT,
                 id="multi-worker-mirrored"),
])
def test_tensorboard_during_and_after_the_run_and_pull(
        machines: Machines, tmp_path: Path, state_dir: Path, mode: str, roles: list[list[str]], trainers: set[str],
        restore: str) -> None:
    tensorboard_and_pull(machines, tmp_path, state_dir, mode, roles, trainers, restore)


def tensorboard_and_pull(machines: Machines, tmp_path: Path, state_dir: Path, mode: str, roles: list[list[str]],
                         trainers: set[str], restore: str) -> None:
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=roles, mode=mode, training={**TRAINING, "slowdown": PACED})
    res = cli(state_dir, "start", str(hosts), "--timeout", "120")
    assert res.returncode == 0, res.stdout + res.stderr
    run_id = started_run_id(res.stdout)
    until_rates(state_dir, run_id, trainers)
    if mode == "multi-worker-mirrored":
        allreduce_measured(run_id, trainers)

    with cli_process(state_dir, "tensorboard", run_id, "--interval", "1") as board:
        url = read_line_matching(board, "TensorBoard for run", 120).split()[-1]
        assert url.startswith("http://127.0.0.1:")
        opened = find_open(run_id)
        assert opened is not None and opened.url == url
        shown = tensorboard_matches_dashboard(state_dir, run_id, url, trainers)
        assert shown["tensorboard"] == url

        res = cli(state_dir, "stop", run_id, "--grace", "5")
        assert res.returncode == 0, res.stdout + res.stderr
        for name in trainers:  # the run is over: TensorBoard still serves every task's curve
            assert scalars(url, name, "loss"), name
        assert scalars(url, sorted(trainers)[0], "steps_per_s")

        board.send_signal(signal.SIGINT)
        assert board.wait(timeout=60) == 0
        assert board.stdout is not None
        assert "nothing of it is left running" in board.stdout.read()
    wait_gone(opened.server_pid)
    assert find_open(run_id) is None
    # the hosts' senders end when their SSH channels close, which the board's exit starts
    wait_for(lambda: not file_senders(machines.port), 10, "the hosts' file senders to end")
    assert not run_processes(run_id)

    dest = tmp_path / "pulled"
    res = cli(state_dir, "pull", run_id, str(dest))
    assert res.returncode == 0, res.stdout + res.stderr
    assert (dest / "logs" / "worker-1.log").stat().st_size > 0
    assert all(any((dest / "summaries" / name).glob("*tfevents*")) for name in trainers)
    again = cli(state_dir, "pull", run_id, str(dest))
    host_lines = [line for line in again.stdout.splitlines() if line.startswith("m")]
    assert again.returncode == 0 and host_lines, again.stdout + again.stderr
    assert all("0 file(s) copied" in line for line in host_lines), again.stdout
    res = cli(state_dir, "stop", run_id, "--purge")  # the hosts' copies gone: what was pulled stands alone
    assert res.returncode == 0, res.stdout + res.stderr
    assert restored_step(restore, dest / "checkpoints") > 0
