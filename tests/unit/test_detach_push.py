"""Readiness is pushed: `supervisor --detach` relays each state the supervisor pushes through its pipe
and returns once every task runs, a task that fails at first and is restarted included (no polling by
anyone). Real processes and files; the tasks are tiny shell programs."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.procs import stop_run_dir
from tests.helpers.waiting import wait_for
from training.run.layout import RUN_DIR_ENV, RunLayout

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[RunLayout]:
    run = RunLayout(str(tmp_path / "runs" / "r1"))
    for d in run.dirs():
        os.makedirs(d, exist_ok=True)
    try:
        yield run
    finally:
        stop_run_dir(run.root)  # whatever the test left running


def _write_run(layout: RunLayout, tasks: list[dict[str, Any]]) -> None:
    run = {"run_id": "r1", "created": time.time(),
           "plan": {"tasks": tasks, "training": {"restart": "on-failure", "max_restarts": 3}},
           "supervisor": {"backoff_initial": 0.3, "backoff_max": 5.0, "grace": 1.0, "poll": 0.02}}
    Path(layout.run_file).write_text(json.dumps(run))


def _detach(layout: RunLayout) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), RUN_DIR_ENV: layout.root}
    proc = subprocess.run([sys.executable, "-S", "-m", "training.supervisor", "--detach", "--run-dir", layout.root,
                           "--host", "h1", "--ready-timeout", "20"], env=env, cwd=layout.code, capture_output=True,
                          text=True, timeout=60, check=True)
    return proc.stdout.splitlines()


def test_detach_waits_for_a_restarted_task_to_run_and_relays_every_state(layout: RunLayout, tmp_path: Path) -> None:
    """The worker's program appears only after its first spawn failed: the supervisor restarts it (backoff)
    and the launcher returns once it runs, having relayed every state on the way."""
    program = tmp_path / "appears-later"
    late = {"job": "worker", "index": 0, "host": "h1", "env": {}, "command": [str(program)]}
    steady = {"job": "ps", "index": 0, "host": "h1", "env": {}, "command": ["sleep", "60"]}
    _write_run(layout, [steady, late])

    def install() -> None:
        """Once the first spawn has failed (its state file says so), never on a timer: under load the
        supervisor may start later than any fixed delay."""
        state = Path(layout.task_state_file("worker", 0))

        def first_spawn_failed() -> bool:
            with contextlib.suppress(OSError, ValueError):
                return json.loads(state.read_text()).get("state") in ("exited", "restarting")
            return False

        wait_for(first_spawn_failed, 20, "the first spawn to fail", interval=0.02)
        tmp = tmp_path / "program.tmp"
        tmp.write_text("#!/bin/sh\nexec sleep 60\n")
        tmp.chmod(0o755)
        tmp.rename(program)

    threading.Thread(target=install, daemon=True).start()
    lines = _detach(layout)
    assert lines[0].startswith("PID ") and lines[-1] == "ALIVE"
    pushed = [json.loads(line) for line in lines if line.startswith("{")]
    worker = [(s["state"], s["restarts"]) for s in pushed if s.get("job") == "worker"]
    assert ("exited", 0) in worker or ("restarting", 1) in worker, worker  # its first spawn failed (127)
    assert worker[-1][0] == "running" and worker[-1][1] >= 1, worker  # returned once it ran
    assert ("running", 0) in [(s["state"], s["restarts"]) for s in pushed if s.get("job") == "ps"]


def test_detach_returns_at_once_when_a_task_fails_for_good(layout: RunLayout) -> None:
    bad = {"job": "worker", "index": 0, "host": "h1", "env": {}, "command": ["/nonexistent/program"]}
    _write_run(layout, [bad])
    Path(layout.run_file).write_text(Path(layout.run_file).read_text().replace('"max_restarts": 3', '"max_restarts": 0'))
    started = time.monotonic()
    lines = _detach(layout)
    assert time.monotonic() - started < 15
    final = [json.loads(line) for line in lines if line.startswith("{") and '"job"' in line][-1]
    assert final["state"] == "exited" and final["final"] and final["exit_code"] == 127
