"""Stop for good: the real supervisor honours a task's hold file (training/supervisor/hold.py).

Real processes and files, as in test_supervisor.py: the supervisor runs as `python -m
training.supervisor` on a temp run dir and the "tasks" are tiny `python -c` programs. The hold is
written and the task signalled by the command the collector runs on a host,
`python -S -m training.supervisor.hold`, decoded as the collector decodes it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.procs import stop_run_dir
from tests.helpers.supervisor_runs import (
    REPO,
    make_run,
    read_task_state,
    start_supervisor,
    supervisor_events,
    task_spec,
    until_released,
)
from tests.helpers.waiting import wait_for
from training.run.layout import RunLayout
from training.supervisor.hold import task_pids
from training.telemetry.state_files import HoldReport
from training.telemetry.task_record import TaskRecord

BACKOFF = 0.2
LOOP = "import time\nwhile True: time.sleep(0.05)\n"  # a task that runs until stopped


@pytest.fixture
def supervisors() -> Iterator[list[tuple[subprocess.Popen[bytes], RunLayout]]]:
    started: list[tuple[subprocess.Popen[bytes], RunLayout]] = []
    yield started
    for proc, layout in started:
        stop_run_dir(layout.root)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _stop_for_good(layout: RunLayout, job: str, index: int) -> HoldReport:
    res = subprocess.run([sys.executable, "-S", "-m", "training.supervisor.hold", "--run-dir", layout.root,
                          "--job", job, "--task", str(index)], check=False, capture_output=True, text=True,
                         timeout=10, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stderr
    return HoldReport.decode(json.loads(res.stdout))


def _plan_extras(layout: RunLayout, **extras: Any) -> None:
    run = json.loads(Path(layout.run_file).read_text())
    run["plan"].update(extras)
    Path(layout.run_file).write_text(json.dumps(run))


def _starts(layout: RunLayout, job: str, index: int) -> int:
    return sum(1 for e in supervisor_events(layout) if e.get("job") == job and e.get("task") == index and e["state"] == "running")


def test_a_held_task_is_final_not_restarted_and_the_others_go_on(tmp_path: Path, supervisors: Any) -> None:
    release = tmp_path / "release"  # every task runs until it exists, then exits 0
    tasks = [("ps", 0), ("worker", 0), ("worker", 1)]
    layout = make_run(tmp_path, [task_spec(j, i, until_released(release)) for j, i in tasks], max_restarts=3,
                       backoff=BACKOFF)
    sup = start_supervisor(layout)
    supervisors.append((sup, layout))
    wait_for(lambda: all(read_task_state(layout, j, i).get("state") == "running" for j, i in tasks),
             10, "every task running")

    report = _stop_for_good(layout, "worker", 1)
    assert report.terminated == (read_task_state(layout, "worker", 1)["pid"],) and report.hold == layout.hold_file("worker", 1)
    hold = json.loads(Path(layout.hold_file("worker", 1)).read_text())
    assert hold["reason"] == "stopped by the user" and abs(hold["held_at"] - time.time()) < 10

    wait_for(lambda: read_task_state(layout, "worker", 1).get("state") == "exited", 10, "worker-1 exited")
    for job, index in (("ps", 0), ("worker", 0)):  # the others keep running
        assert read_task_state(layout, job, index)["state"] == "running" and not read_task_state(layout, job, index)["held"]
    # The hold is one task's: worker-0, killed without one, is restarted by the policy. It was killed after
    # worker-1 exited and waits the same first backoff: once it runs again, a restart of worker-1 would have
    # happened too (an event after the moment, never a fixed wait).
    os.kill(read_task_state(layout, "worker", 0)["pid"], signal.SIGKILL)
    wait_for(lambda: (s := read_task_state(layout, "worker", 0)).get("restarts") == 1 and s["state"] == "running",
             10, "worker-0 restarted and running")
    st = read_task_state(layout, "worker", 1)
    assert st["state"] == "exited" and st["final"] and st["held"] is True
    assert st["signal"] == signal.SIGTERM and st["restarts"] == 0 and _starts(layout, "worker", 1) == 1
    assert TaskRecord.from_json(st).held  # the one decoder reads it (and decides `held` itself)
    mine = [e for e in supervisor_events(layout) if e.get("job") == "worker" and e.get("task") == 1]
    assert (mine[-1]["state"], mine[-1]["held"], mine[-1]["final"]) == ("exited", True, True)
    assert not any(e["state"] == "restarting" for e in mine)
    assert read_task_state(layout, "ps", 0)["state"] == "running" and sup.poll() is None
    # The others end normally; the held task is no failure, so this host's run is `finished`.
    release.touch()
    assert sup.wait(timeout=20) == 0
    assert json.loads(Path(layout.supervisor_state_file("h1")).read_text())["state"] == "finished"
    assert _starts(layout, "worker", 1) == 1


def test_a_task_held_while_it_waits_to_restart_is_never_started_again(tmp_path: Path, supervisors: Any) -> None:
    layout = make_run(tmp_path, [task_spec("worker", 0, "import sys; sys.exit(3)")], max_restarts=3, backoff=1.0)
    sup = start_supervisor(layout)
    supervisors.append((sup, layout))
    wait_for(lambda: read_task_state(layout, "worker", 0).get("state") == "restarting", 10, "worker-0 restarting")
    assert _stop_for_good(layout, "worker", 0).terminated == ()  # no process to signal: only the hold file
    assert sup.wait(timeout=20) == 0  # its only task is final and not a failure
    st = read_task_state(layout, "worker", 0)
    assert (st["state"], st["final"], st["held"], st["exit_code"], st["restarts"]) == ("exited", True, True, 3, 1)
    assert _starts(layout, "worker", 0) == 1
    assert json.loads(Path(layout.supervisor_state_file("h1")).read_text())["state"] == "finished"


def test_stop_for_good_terms_every_process_of_the_task_and_nothing_else(tmp_path: Path, supervisors: Any) -> None:
    """A task run through `sh -c` has a grandchild: both are the task's (by TFCLUSTER_TASK_ID), both get the
    SIGTERM; another task's processes are left alone."""
    sh_task = {"job": "worker", "index": 0, "host": "h1", "env": {},
               "command": ["/bin/sh", "-c", f"{sys.executable} -c 'import time; time.sleep(60)'; echo after"]}
    layout = make_run(tmp_path, [sh_task, task_spec("worker", 1, LOOP)], backoff=BACKOFF)
    sup = start_supervisor(layout)
    supervisors.append((sup, layout))
    wait_for(lambda: len(task_pids(layout.root, "worker", 0)) == 2 and read_task_state(layout, "worker", 1).get("state") == "running",
             10, "worker-0's two processes and worker-1 running")
    before = task_pids(layout.root, "worker", 0)
    report = _stop_for_good(layout, "worker", 0)
    assert list(report.terminated) == before and read_task_state(layout, "worker", 0)["pid"] in before
    wait_for(lambda: read_task_state(layout, "worker", 0).get("state") == "exited", 10, "worker-0 exited")
    assert read_task_state(layout, "worker", 0)["held"] and read_task_state(layout, "worker", 0)["restarts"] == 0
    wait_for(lambda: not task_pids(layout.root, "worker", 0), 3, "worker-0's processes gone")
    assert read_task_state(layout, "worker", 1)["state"] == "running" and len(task_pids(layout.root, "worker", 1)) == 1
