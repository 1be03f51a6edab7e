"""`tfcluster demo --headless`: a real local TF cluster (1 ps, 2 workers) trains to the end, the final
state is printed, and nothing of the run is left running."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import requires
from tests.integration.lifecycle_helpers import run_processes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]
requires.tensorflow()
ROOT = Path(__file__).resolve().parents[2]


def test_demo_headless_trains_and_prints_final_state(state_dir: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "tfcluster", "demo", "--headless", "--steps", "200", "--json",
                          "--interval", "0.5", "--timeout", "300"], check=False, cwd=ROOT, capture_output=True,
                         text=True, timeout=380)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    st = json.loads(res.stdout)
    tasks = {t["name"]: t for t in st["tasks"]}
    assert set(tasks) == {"ps:0", "worker:0", "worker:1"}
    assert all(t["state"] == "exited" and t["exit_code"] == 0 for t in tasks.values()), tasks
    assert st["totals"]["global_step"] >= 200
    assert "stopping run" in res.stderr
    assert not run_processes(st["run_id"])
    assert not list((state_dir / "runs").glob("*.json"))  # the demo leaves no run record behind
