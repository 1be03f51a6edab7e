"""A task the plan gives a GPU that TensorFlow does not see fails, clearly, for good (issue 35 item 1): the
real CLI over real sshd, real TensorFlow.

No GPU ran here and none is faked: this machine has no GPU and its TensorFlow is `tensorflow-cpu`, so a
plan giving a task GPU 0 is exactly the case of a GPU host whose TensorFlow cannot use its GPUs. The
cheapest plan with a GPU task: multi-worker-mirrored, one worker host with `gpus = [0]`, so ONE TensorFlow
process (worker:0).

- `start` exits 1 with the task's one line: host, `worker:0`, CUDA_VISIBLE_DEVICES=0, "TensorFlow sees 0
  GPUs", and the cause (a CPU-only build); nothing is left running; the task was not restarted (its restart
  budget notwithstanding) and `status` shows the same line as its error.
- `check` says the host is not ready, with the same line (its probe imports TensorFlow once).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.sshd import Machines
from tests.integration.lifecycle_helpers import cli, records, run_processes, status_json
from training.probes.gpu_check import CPU_ONLY_BUILD, gpu_problem

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

LINE = gpu_problem("worker:0 on m0", "0", 0, CPU_ONLY_BUILD)


def _hosts(machines: Machines, tmp_path: Path) -> Path:
    return machines.hosts_toml(tmp_path / "hosts.toml", roles=[["worker"]], mode="multi-worker-mirrored",
                               host_extra={0: {"gpus": [0]}},
                               training={"model": "mlp", "steps": 50, "max_restarts": 3})


def test_start_fails_for_good_with_the_line_and_leaves_nothing_running(
        machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    assert "TensorFlow sees 0 GPUs: this TensorFlow is a CPU-only build" in LINE
    started = cli(state_dir, "start", str(_hosts(machines, tmp_path)), "--timeout", "120", timeout=200)
    said = " ".join((started.stdout + started.stderr).split())  # the terminal may wrap the error line
    assert started.returncode == 1 and "started " not in started.stdout, said
    assert "task-failed" in said and LINE in said, said
    run_id = records(state_dir)[-1]["run_id"]
    assert not run_processes(run_id)

    _, status = status_json(state_dir, run_id)
    [task] = [t for t in status["tasks"] if t["name"] == "worker:0"]
    assert task["final"] and task["exit_code"] == 78 and task["restarts"] == 0, task
    assert task["error"] == LINE, task


def test_check_says_the_gpu_host_is_not_ready_with_the_same_line(
        machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    res = cli(state_dir, "check", str(_hosts(machines, tmp_path)), "--json", timeout=180)
    report = json.loads(res.stdout)
    [row] = report["hosts"]
    assert res.returncode == 1 and not row["ready"], row
    assert (row["tf_gpus_checked"], row["tf_gpus_seen"]) == ("0", 0), row
    assert LINE in row["problems"], row["problems"]
