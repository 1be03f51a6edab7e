"""The hand-over of a Slurm run without Slurm (the job's step is a plain process here; the real one is in
tests/integration/test_slurm_*.py): `supervisor --step` and `supervisor --hand-over` meet through the run
dir's FIFOs whichever starts first; the start side writes `go`, hands the forwarded variables over (the
task sees them, no file holds them) and relays the step's supervisor's states until its task runs, then
`ALIVE`; a supervisor stopped by SIGTERM exits 75; a step whose start command never comes gives up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.procs import stop_run_dir
from tests.helpers.waiting import wait_for
from training.run.layout import RUN_DIR_ENV, RunLayout
from training.supervisor import handover

REPO = Path(__file__).resolve().parents[2]
SECRET = "forwarded-value-not-for-files"


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[RunLayout]:
    run = RunLayout(str(tmp_path / "runs" / "r1" / "n1"))
    for d in run.dirs():
        os.makedirs(d, exist_ok=True)
    task = {"job": "worker", "index": 0, "host": "n1", "env": {},
            "command": ["/bin/sh", "-c", 'printf "%s" "$TFC_SECRET" | sha256sum > seen; exec sleep 60']}
    Path(run.run_file).write_text(json.dumps({
        "run_id": "r1", "created": time.time(), "plan": {"tasks": [task], "training": {"restart": "never"}},
        "supervisor": {"backoff_initial": 0.3, "backoff_max": 5.0, "grace": 1.0, "poll": 0.02}}))
    try:
        yield run
    finally:
        stop_run_dir(run.root)  # whatever the test left running


def supervisor(layout: RunLayout, *flags: str, secret: bool = False) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), RUN_DIR_ENV: layout.root}
    env.pop("TFC_SECRET", None)
    if secret:
        env["TFC_SECRET"] = SECRET
    return subprocess.Popen([sys.executable, "-S", "-m", "training.supervisor", *flags, "--run-dir", layout.root,
                             "--host", "n1"], env=env, cwd=layout.lib, stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize("first", ["step", "start"])
def test_the_step_and_the_start_command_meet_and_the_task_gets_the_forwarded_value(layout: RunLayout,
                                                                                  first: str) -> None:
    def start() -> subprocess.Popen[str]:
        return supervisor(layout, "--hand-over", "--go", "--forwarded", "TFC_SECRET,NOT_SET", "--ready-timeout",
                          "20", secret=True)

    launched = [supervisor(layout, "--step") if first == "step" else start()]
    wait_for(Path(layout.root, handover.FIFO_IN).exists, 10, "the first side's FIFOs")  # then the other comes
    launched.append(start() if first == "step" else supervisor(layout, "--step"))
    step = launched[0] if first == "step" else launched[1]
    hand = launched[1] if first == "step" else launched[0]
    out, _ = hand.communicate(timeout=30)
    lines = out.splitlines()
    assert hand.returncode == 0 and lines[0] == f"PID {step.pid}" and lines[-1] == "ALIVE", lines
    assert any(json.loads(line).get("state") == "running" for line in lines if line.startswith('{"kind":"task_state"'))
    assert Path(layout.root, handover.GO_FILE).exists()
    assert not Path(layout.root, handover.FIFO_IN).exists() and not Path(layout.root, handover.FIFO_OUT).exists()
    seen = Path(layout.code, "seen")
    wait_for(seen.exists, 10, "the task to write what it saw")
    expected = subprocess.run(["sha256sum"], input=SECRET, capture_output=True, text=True, check=True).stdout
    assert seen.read_text() == expected  # the value reached the task through the hand-over
    files = [p for p in Path(layout.root).rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert files == []
    step.terminate()  # as `stop` or Slurm ends it
    assert step.wait(timeout=30) == handover.STOPPED_EXIT


def test_a_step_whose_start_command_never_comes_gives_up(layout: RunLayout) -> None:
    code = f"import sys; from training.supervisor.handover import serve_step; sys.exit(serve_step({layout.root!r}, 'n1', 0.3))"
    res = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=30,
                         check=False)
    assert res.returncode == 1
    log = Path(layout.logs, "supervisor-n1.log").read_text()
    assert "no hand-over from `tfcluster start` within 0.3s: not starting" in log
    assert not Path(layout.task_state_file("worker", 0)).exists()  # nothing started
