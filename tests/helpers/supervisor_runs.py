"""The per-host supervisor run as a real process on a run dir built here: the tasks are tiny `python -c`
programs (no TensorFlow), the run file is the one the launcher writes, reduced to what the supervisor reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.helpers.procs import marked
from training.run.layout import RunLayout

REPO = Path(__file__).resolve().parents[2]
# The tasks are tiny Python programs; a `time.sleep(60)` in one is a task that runs until the test stops it.
UNTIL_STOPPED = "import time; time.sleep(60)"


def task_spec(job: str, index: int, code: str, host: str = "h1") -> dict[str, Any]:
    return {"job": job, "index": index, "host": host, "command": [sys.executable, "-c", code],
            "env": {"TFCLUSTER_JOB": job, "TFCLUSTER_TASK": str(index)}}


def make_run(tmp_path: Path, tasks: list[dict[str, Any]], restart: str = "on-failure",
             max_restarts: int = 3, backoff: float = 0.2, grace: float = 2.0) -> RunLayout:
    layout = RunLayout(str(tmp_path / "runs" / "r1"))
    for d in layout.dirs():
        os.makedirs(d, exist_ok=True)
    run = {"run_id": "r1", "created": time.time(),
           "plan": {"tasks": tasks, "training": {"restart": restart, "max_restarts": max_restarts}},
           "supervisor": {"backoff_initial": backoff, "backoff_max": 5.0, "grace": grace, "poll": 0.02}}
    Path(layout.run_file).write_text(json.dumps(run))
    return layout


def start_supervisor(layout: RunLayout, host: str = "h1") -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "training.supervisor", "--run-dir", layout.root,
                             "--host", host], env=env, start_new_session=True)


def read_task_state(layout: RunLayout, job: str, index: int) -> dict[str, Any]:
    try:
        return json.loads(Path(layout.task_state_file(job, index)).read_text())
    except (OSError, ValueError):
        return {}


def supervisor_events(layout: RunLayout, host: str = "h1") -> list[dict[str, Any]]:
    path = Path(layout.supervisor_events_file(host))
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_pids(run_dir: str) -> list[int]:
    return [p.pid for p in marked(lambda marker: marker == run_dir)]


def until_released(release: Path) -> str:
    """A task that runs until the file `release` exists (it polls for it), then exits 0."""
    return f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.02)\n"
