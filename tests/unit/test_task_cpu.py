"""TaskCpu on real processes: a busy task, its `sh -c` wrapped twin, an idle task and a busy process of
another run; cross-checked against psutil's reading of the same processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

from tests.helpers.waiting import wait_for
from training.telemetry.task_cpu import TaskCpu

BUSY = "import time\nwhile True:\n    sum(range(1000))\n"
IDLE = "import time\ntime.sleep(60)\n"  # a task that uses no CPU until killed


def start(code: str, run_dir: Path, task_id: str, wrap: bool = False) -> subprocess.Popen[bytes]:
    """A task process, returned once it has exec'd: until then it shows this test's environment, unmarked,
    which a meter takes for another program's for as long as the pid lives. (A supervisor's task shows the
    supervisor's environment until then, marked with the run but with no task id: never taken so.)"""
    env = {**os.environ, "TFCLUSTER_RUN_DIR": str(run_dir), "TFCLUSTER_TASK_ID": task_id}
    argv = [sys.executable, "-c", code]
    if wrap:  # the real program is a grandchild: `sh -c "python ... ; true"` keeps sh alive
        argv = ["sh", "-c", f"{sys.executable} -c '{code}'; true"]
    proc = subprocess.Popen(argv, env=env)
    marker = f"TFCLUSTER_TASK_ID={task_id}".encode()
    wait_for(lambda: marker in Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0"), 10,
             f"{task_id} to exec")
    return proc


def cpu_of(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        t = p.cpu_times()
        total += t.user + t.system
    return total


def test_task_cpu_counts_each_tasks_processes(tmp_path: Path) -> None:
    run, other = tmp_path / "run", tmp_path / "other-run"
    children = [
        start(BUSY, run, "worker-0#0"),
        start(BUSY, run, "worker-2#1", wrap=True),
        start(IDLE, run, "worker-1#0"),
        start(BUSY, other, "worker-0#0"),
    ]
    grandchildren: list[psutil.Process] = []
    try:
        grandchildren = wait_for(lambda: psutil.Process(children[1].pid).children(), 10, "sh to start its child")
        w0 = [psutil.Process(children[0].pid)]
        w2 = [psutil.Process(children[1].pid), *grandchildren]
        assert len(w2) == 2
        meter = TaskCpu(str(run))
        first = meter.sample()
        ps_w0, ps_w2 = cpu_of(w0), cpu_of(w2)
        # Until both busy tasks have burnt CPU time (psutil's count): how long that takes is the load's.
        wait_for(lambda: cpu_of(w0) - ps_w0 >= 0.2 and cpu_of(w2) - ps_w2 >= 0.2, 30, "the busy tasks to use CPU")
        second = meter.sample()
        d_ps_w0, d_ps_w2 = cpu_of(w0) - ps_w0, cpu_of(w2) - ps_w2
    finally:
        for grandchild in grandchildren:
            grandchild.kill()  # sh's child would outlive sh
        for child in children:
            child.kill()
        for child in children:
            child.wait()
        psutil.wait_procs(grandchildren, timeout=5)
    assert set(second) == {"worker-0", "worker-1", "worker-2"}  # not the other run's busy process
    assert (second["worker-0"]["procs"], second["worker-1"]["procs"], second["worker-2"]["procs"]) == (1, 1, 2)
    d_w0 = second["worker-0"]["cpu_s"] - first["worker-0"]["cpu_s"]
    d_w2 = second["worker-2"]["cpu_s"] - first["worker-2"]["cpu_s"]
    d_w1 = second["worker-1"]["cpu_s"] - first["worker-1"]["cpu_s"]
    assert d_w0 > 0 and abs(d_w0 - d_ps_w0) < 0.06  # a busy loop moves (how much depends on the load)
    assert d_w2 > 0 and abs(d_w2 - d_ps_w2) < 0.06
    assert d_w1 < 0.05  # sleeping
    gone = meter.sample()
    assert gone == {} or all(v["procs"] == 0 for v in gone.values())


def test_task_cpu_keeps_counting_across_attempts_and_never_goes_back(tmp_path: Path) -> None:
    run = tmp_path / "run"
    meter = TaskCpu(str(run))
    first = start(BUSY, run, "worker-0#0")
    try:
        a: float = wait_for(lambda: cpu_s(meter), 30, "the first attempt's CPU time")
    finally:
        first.kill()
        first.wait()
    assert meter.sample() == {}
    second = start(BUSY, run, "worker-0#1")  # the next attempt
    try:
        assert wait_for(lambda: cpu_s(meter) or None, 30, "the next attempt seen") >= a  # never goes back
        wait_for(lambda: cpu_s(meter) > a, 30, "the next attempt's CPU time counted on")
    finally:
        second.kill()
        second.wait()


def cpu_s(meter: TaskCpu) -> float:
    """worker-0's CPU seconds as the meter counts them now (0.0 while it has no process)."""
    return float(meter.sample().get("worker-0", {}).get("cpu_s", 0.0))
