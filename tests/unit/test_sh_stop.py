"""`stop` on one host (orchestrator/run/sh_stop.py, the only stop: no Python started on the host, so it
works when the host's python is gone too) through RemoteRun.stop over a LocalTransport: a real /bin/sh,
real processes carrying a run's marker (one that ignores SIGTERM), real files. No network."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from orchestrator.config.schema import SSHOptions
from orchestrator.plan.model import HostPlan
from orchestrator.run.remote import RemoteRun
from tests.helpers.procs import read_pid, wait_gone
from tests.helpers.waiting import wait_for


def _host(tmp_path: Path) -> HostPlan:
    return HostPlan(name="local", address="127.0.0.1", transport="local", python=str(tmp_path / "gone" / "python3"),
                    workdir=str(tmp_path), ssh=SSHOptions(), roles=("worker",), tasks=())


def _run(run_dir: Path, script: str, procs: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["/bin/sh", "-c", script], env={**os.environ, "TFCLUSTER_RUN_DIR": str(run_dir)},
                            start_new_session=True)
    procs.append(proc)
    return proc


def test_stop_without_python_kills_every_marked_process_and_purges(
        tmp_path: Path, spawned: list[subprocess.Popen[bytes]]) -> None:
    run_dir = tmp_path / "runs" / "r1" / "local"
    (run_dir / "code").mkdir(parents=True)  # the run is there; its python is not (the stop needs none)
    polite = _run(run_dir, "exec sleep 300", spawned)
    trapped = tmp_path / "trapped"
    stubborn = _run(run_dir, f"trap '' TERM; : > {trapped}; sleep 300 & wait; sleep 300", spawned)
    (tmp_path / "runs" / "r1" / "local-other").mkdir()
    other = _run(tmp_path / "runs" / "r1" / "local-other", "exec sleep 300", spawned)  # another host: a longer marker
    wait_for(trapped.exists, 30, "the stubborn task to ignore SIGTERM")
    verdict = RemoteRun(_host(tmp_path), str(run_dir)).stop(grace=1, timeout=30, purge=True)
    assert {polite.pid, stubborn.pid} <= set(verdict.report.terminated)  # no supervisor: each one TERMed
    assert stubborn.pid in verdict.report.killed and polite.pid not in verdict.report.killed
    assert verdict.report.remaining == () and verdict.purged and not run_dir.exists()
    assert (tmp_path / "runs" / "r1").is_dir()  # another host's part is still there: the run's dir stays
    assert polite.wait(5) == -signal.SIGTERM and stubborn.wait(5) == -signal.SIGKILL
    assert other.poll() is None  # untouched
    again = RemoteRun(_host(tmp_path), str(run_dir)).stop(grace=1, timeout=30, purge=True)
    assert again.report.absent and again.report.remaining == ()


def test_stop_without_python_keeps_the_run_dir_unless_purging(
        tmp_path: Path, spawned: list[subprocess.Popen[bytes]]) -> None:
    run_dir = tmp_path / "runs" / "r2" / "local"
    (run_dir / "code").mkdir(parents=True)
    task = _run(run_dir, "exec sleep 300", spawned)
    verdict = RemoteRun(_host(tmp_path), str(run_dir)).stop(grace=0, timeout=30)
    assert task.pid in verdict.report.terminated and not verdict.purged and run_dir.is_dir()


def test_a_live_supervisor_is_asked_first_and_stops_its_own_tasks(
        tmp_path: Path, spawned: list[subprocess.Popen[bytes]]) -> None:
    """With a supervisor, only it gets SIGTERM (it stops its tasks itself and records them stopped, as
    training/supervisor does): the tasks are never signalled behind its back."""
    run_dir = tmp_path / "runs" / "r3" / "local"
    (run_dir / "state").mkdir(parents=True)
    task_pid = tmp_path / "task.pid"
    # Its trap is set before it writes the pid the test waits for: a TERM can never come before the trap.
    supervisor = _run(run_dir, f"trap 'kill $!; echo stopped-it > {tmp_path}/said; exit 0' TERM; "
                               f"sleep 300 & echo $! > {task_pid}; wait", spawned)
    task = read_pid(task_pid)
    (run_dir / "state" / "supervisor-local.json").write_text(json.dumps({"kind": "supervisor", "pid": supervisor.pid}))
    verdict = RemoteRun(_host(tmp_path), str(run_dir)).stop(grace=5, timeout=30)
    assert verdict.report.terminated == (supervisor.pid,) and verdict.report.killed == ()
    assert verdict.report.remaining == () and (tmp_path / "said").read_text() == "stopped-it\n"
    assert supervisor.wait(5) == 0
    wait_gone(task)
