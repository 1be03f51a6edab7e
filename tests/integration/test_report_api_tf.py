"""tfcluster_report from a REAL TensorFlow program (tests/fixtures_src/report): a MonitoredTrainingSession
with TfclusterHook (the plain report() loop and Keras fit with TfclusterCallback run over the real sshd in
test_user_programs.py). It runs as
a subprocess with the environment the supervisor gives a task and only training/public on its
PYTHONPATH; the events it writes must drive the orchestrator's reducer to steps/s > 0."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.monitor.events import EventParser, ProgressEvent
from orchestrator.monitor.reducer import ClusterState
from training.run.layout import RunLayout

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "fixtures_src" / "report"


def run_task(program: str, tmp_path: Path) -> list[dict[str, Any]]:

    run_dir = tmp_path / "run"
    layout = RunLayout(str(run_dir))
    for d in layout.dirs():
        os.makedirs(d, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps({"plan": {"training": {"progress_interval": 0.25}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFCLUSTER_")}
    env.update({"PYTHONPATH": str(ROOT / "training" / "public"), "PYTHONUNBUFFERED": "1",
                "TF_CPP_MIN_LOG_LEVEL": "2", "TFCLUSTER_RUN_DIR": str(run_dir), "TFCLUSTER_JOB": "worker",
                "TFCLUSTER_TASK": "0", "TFCLUSTER_HOST": "h1", "TFCLUSTER_TASK_ID": "worker-0#0"})
    res = subprocess.run([sys.executable, str(PROGRAMS / program)], check=False, cwd=layout.code, env=env,
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    assert Path(layout.self_progress_file("worker", 0)).read_text().strip() == "worker-0#0"
    lines = Path(layout.events_file("worker", 0)).read_text(encoding="utf-8").splitlines()
    parser = EventParser()
    state = ClusterState(now=0.0)
    for line in lines:
        event = parser.parse(line)
        assert isinstance(event, ProgressEvent), line
        state.apply(event, event.t)
    events = [json.loads(line) for line in lines]
    state.tick(events[-1]["t"])
    view = state.tasks["worker:0"]
    assert parser.malformed == 0
    assert len(events) >= 3
    steps = [e["local_step"] for e in events]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    assert all(e["loss"] is not None and math.isfinite(e["loss"]) for e in events)
    assert events[-1]["loss"] < events[0]["loss"]  # it trained
    assert view.steps_per_s is not None and view.steps_per_s > 0
    assert view.state == "running"
    return events


def test_monitored_session_hook(tmp_path: Path) -> None:
    events = run_task("session_hook.py", tmp_path)
    assert events[-1]["local_step"] == 300
    assert events[-1]["global_step"] == 299  # fetched with the run: the step as the last run began
    assert events[-1]["examples"] == 300 * 32
