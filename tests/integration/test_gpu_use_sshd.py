"""GPU use per task over real sshd (issue 35 item 3): a machine whose host has `gpus = [0, 1]` runs a user's
plain-Python program as ps:0 (on the CPU), worker:0 (GPU 0) and worker:1 (GPU 1).

This test fakes the GPU and nothing else: an `nvidia-smi` script first on the machine's PATH (its HOME's
.bashrc, as a driver's bin dir would be: testkit/fake_gpus.py) reports GPU 0 busy with worker:0's REAL pid
(the program writes its own pid; the supervisor starts it, finds it by its run markers, and attributes
it) holding 1234 MiB, and no process of worker:1's anywhere. The supervisor, the facts file, the read of the
host and the CLI's JSON are the real ones: `dash --once --json` and `status --json` show worker:0's memory
and its GPU's utilisation, and worker:1 flagged `on CPU?` once it has run GPU_SETTLE_S seconds; so does the
dashboard (`tfcluster dash` in a terminal, through its own agents).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.monitor.gpu_use import GPU_SETTLE_S
from testkit.fake_gpus import FakeApp, FakeGpu, install
from testkit.sshd import Machines
from tests.helpers.terminal import Terminal
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import (
    REPO,
    cli,
    cli_env,
    dash_json,
    run_processes,
    status_json,
    unique_run_id,
)

pytestmark = pytest.mark.integration

PROGRAM = '''\
import os, sys, time
path = os.path.join({pids!r}, f"{{sys.argv[1]}}-{{sys.argv[2]}}.pid")
with open(path + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(path + ".tmp", path)  # the fake nvidia-smi reads it whole or not at all
print("up", flush=True)
while True:
    sum(range(20000))  # some CPU: the program is seen working
    time.sleep(0.2)
'''
HELD_MIB = 1234.0


def _tasks(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in doc["tasks"]}


def test_dash_and_status_show_gpu_use_per_task_and_flag_a_task_on_the_cpu(
        sshd_machines: Callable[..., Machines], tmp_path: Path, state_dir: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    home = tmp_path / "home"
    install(home, [FakeGpu(0, util_pct=87.0, mem_used_mb=1300.0, temp_c=71.0, power_w=245.5),
                   FakeGpu(1, util_pct=0.0, mem_used_mb=3.0, temp_c=33.0, power_w=40.0)],
            [FakeApp(str(pids / "worker-0.pid"), gpu=0, mib=HELD_MIB)])
    machines = sshd_machines(1, home=str(home))
    (tmp_path / "prog.py").write_text(PROGRAM.format(pids=str(pids)))
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps", "worker"]], host_extra={0: {"gpus": [0, 1]}},
                                training={"command": "{python} prog.py {job} {task}", "sync": ["prog.py"]})
    run_id = unique_run_id("gpu-use")
    res = cli(state_dir, "start", str(hosts), "--run", run_id)
    assert res.returncode == 0, res.stdout + res.stderr
    try:
        pid0 = int(wait_for(lambda: (pids / "worker-0.pid").exists() and (pids / "worker-0.pid").read_text(), 60,
                            "worker:0's program to write its pid"))

        def worker0_on_gpu() -> dict[str, Any] | None:
            doc = dash_json(state_dir, run_id)
            use = _tasks(doc)["worker:0"]["gpu_use"]
            return doc if use and use[0]["task_mem_mb"] == HELD_MIB else None

        doc = wait_for(worker0_on_gpu, 60, "worker:0's GPU memory in dash --once --json", interval=0.5,
                       explain=lambda: json.dumps(_tasks(dash_json(state_dir, run_id)), indent=1)[-3000:])
        tasks = _tasks(doc)
        assert tasks["worker:0"]["gpu_use"] == [{"index": 0, "util_pct": 87.0, "mem_used_mb": 1300.0,
                                                 "mem_total_mb": 16384.0, "task_mem_mb": HELD_MIB}]
        assert tasks["ps:0"]["gpu_use"] == [] and not tasks["ps:0"]["on_cpu_suspected"]
        gpus = {g["index"]: g for g in doc["hosts"][0]["gpus"]}
        assert (gpus[0]["temp_c"], gpus[0]["power_w"], gpus[1]["temp_c"]) == (71.0, 245.5, 33.0)
        assert pid0 in {p.pid for p in run_processes(run_id)}  # the pid the fake named is the run's own

        def worker1_flagged() -> dict[str, Any] | None:
            doc = dash_json(state_dir, run_id)
            return doc if _tasks(doc)["worker:1"]["on_cpu_suspected"] else None

        doc = wait_for(worker1_flagged, GPU_SETTLE_S + 60, "worker:1 flagged on CPU? once settled", interval=1.0,
                       explain=lambda: json.dumps(_tasks(dash_json(state_dir, run_id))["worker:1"]))
        tasks = _tasks(doc)
        assert tasks["worker:1"]["gpu_use"] == [{"index": 1, "util_pct": 0.0, "mem_used_mb": 3.0,
                                                 "mem_total_mb": 16384.0, "task_mem_mb": 0.0}]
        assert not tasks["worker:0"]["on_cpu_suspected"]  # settled too, and holding its memory
        _code, st = status_json(state_dir, run_id)  # status prints the same document
        st_tasks = _tasks(st)
        assert st_tasks["worker:1"]["on_cpu_suspected"] and st_tasks["worker:0"]["gpu_use"][0]["task_mem_mb"] == HELD_MIB
        calls = [json.loads(line)["args"][0] for line in (home / "nvidia-smi.calls").read_text().splitlines()]
        assert {c.split("=", 1)[0] for c in calls} == {"--query-gpu", "--query-compute-apps"}

        # The TUI on the same run: `tfcluster dash` in a terminal, its agents asking the same nvidia-smi
        argv = [sys.executable, "-m", "tfcluster", "dash", run_id]
        with Terminal(argv, cli_env(state_dir), REPO, columns=200, lines=40) as dash:
            dash.wait_until_shown(lambda text: "1.2G" in text and "on CPU?" in text, 90,
                                  "worker:0's 1.2G and worker:1's `on CPU?` in the dashboard's table")
            dash.write(b"q")
            assert dash.wait_exit(20) == 0, dash.text()[-3000:]
    finally:
        stopped = cli(state_dir, "stop", run_id, "--grace", "2")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        wait_for(lambda: not run_processes(run_id), 30, "the run's processes to end")
        machines.close()
