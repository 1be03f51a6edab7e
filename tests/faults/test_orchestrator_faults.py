"""`tfcluster start` SIGKILLed half-way (real sshd on 3 loopback machines, between-graph), at two moments:

- during prepare (its run record just written, nothing launched): the hosts' launchers wait at the
  barrier with their stdin open; the orchestrator's death closes it and they exit: nothing runs;
- during launch (the first supervisor of the run is alive): the hosts that got `go` run on; the run is
  one `status` and `stop` can handle, and `stop` leaves nothing.

Either way `ls` says `interrupted` (not `starting` forever), and no process of the run is left. These are
the orchestrator's faults, not TensorFlow's: the tasks, once launched, run the plain trainer
(tests/helpers/plain_trainer.py, through `[training] command`, as users' own programs run).
(The dashboard SIGKILLed is a stage of test_between_graph_faults.py: it needs a live run.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from testkit.sshd import Machines
from tests.faults import measure
from tests.faults.cluster import BETWEEN_GRAPH
from tests.helpers.plain_trainer import plain_training
from tests.helpers.procs import cmdline
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import (
    REPO,
    cli,
    cli_env,
    run_processes,
)
from training.run.layout import host_module

pytestmark = [pytest.mark.integration, pytest.mark.faults]


def record_of(state_dir: Path, run_id: str) -> dict[str, Any] | None:
    path = state_dir / "runs" / f"{run_id}.json"
    try:
        return json.loads(path.read_text()) if path.exists() else None
    except ValueError:
        return None  # being written


def shown_status(state_dir: Path, run_id: str) -> str:
    res = cli(state_dir, "ls")
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    header = next(line for line in lines if "last known" in line).replace("┃", "│")
    row = next((line for line in lines if run_id in line), "")
    assert row, res.stdout
    column = [c.strip() for c in header.split("│")].index("last known")
    return row.split("│")[column].strip()


def supervisors(run_id: str) -> list[psutil.Process]:
    """The run's supervisors (launched on `go`); the launchers before them carry the run's marker too."""
    return [p for p in run_processes(run_id) if host_module("supervisor") in cmdline(p)]


@pytest.mark.parametrize("moment", ["prepare", "launch"])
def test_start_sigkilled_leaves_nothing_half_started(machines: Machines, tmp_path: Path, state_dir: Path,
                                                     moment: str) -> None:
    """See the module docstring: `ls` says interrupted; nothing runs (killed in prepare) or the run is
    stopped by `stop` with nothing left (killed in launch); `status` answers (JSON, no traceback)."""
    run_id = f"killed-in-{moment}"
    with measure.measuring(f"SIGKILL tfcluster start during {moment}", "start killed") as m:
        hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=BETWEEN_GRAPH,
                                    training=plain_training(tmp_path))
        start = subprocess.Popen([sys.executable, "-m", "tfcluster", "start", str(hosts), "--run", run_id],
                                 env=cli_env(state_dir), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 start_new_session=True)
        try:
            if moment == "prepare":
                wait_for(lambda: record_of(state_dir, run_id), 60, "start to write its run record", interval=0.02)
            else:
                wait_for(lambda: supervisors(run_id), 90, "a first supervisor of the run", interval=0.05)
            at = time.time()
            os.kill(start.pid, signal.SIGKILL)
            start.wait(10)
        finally:
            if start.poll() is None:
                start.kill()
                start.wait(10)
            assert start.stderr is not None
            start.stderr.close()
        rec = record_of(state_dir, run_id)
        assert rec is not None and rec["status"] == "starting", rec  # the record as the killed start left it
        m["killed_after"] = moment
        m["hosts_marked_started"] = sum(1 for h in rec["hosts"] if h.get("started"))
        assert shown_status(state_dir, run_id) == "interrupted"
        if moment == "prepare":
            # Nothing was launched: the launchers at the barrier see their stdin close and exit.
            assert m["hosts_marked_started"] == 0
            wait_for(lambda: not run_processes(run_id), 30, "the barrier's launchers to exit")
            m["processes_left_before_stop"] = 0
            m["recover_s"] = round(time.time() - at, 1)
        else:
            assert m["hosts_marked_started"] == 3, rec
            m["processes_left_before_stop"] = len(run_processes(run_id))
        res = cli(state_dir, "status", run_id, "--json", timeout=60)
        m["status_exit"] = res.returncode
        assert res.stdout.strip() and "Traceback" not in res.stderr, res.stderr
        json.loads(res.stdout)
        res = cli(state_dir, "stop", run_id, "--grace", "2")
        m["stop_exit"] = res.returncode
        assert res.returncode == 0, res.stdout + res.stderr
        if moment == "launch":
            m["recover_s"] = round(time.time() - at, 1)  # killed start -> stopped, verified
        m["processes_left"] = len(run_processes(run_id))
        assert m["processes_left"] == 0, run_processes(run_id)
