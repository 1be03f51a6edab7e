"""`start --wait` never hangs (issue 21 point 1), over real sshd on 3 loopback machines.

- The plain trainer (tests/helpers/plain_trainer.py, a stdlib program reporting through tfcluster_report,
  run through `[training] command`), between-graph (ps:0 on m0, the chief worker:0 on m1, worker:1 on m2):
  m2 dies whole (its sshd, its sessions, its supervisor and its worker killed) while `start --wait`
  follows; then the chief finishes by itself (its release file appears; the other tasks run until the run
  ends them). Under `success = "chief"` that finishes the run: `start --wait` exits 0, says the run
  finished with worker:1 lost on the way, at most two liveness windows after the chief's exit.
- A stdlib task program (the user-command path): the ps's machine dies; the run cannot finish without
  it: `start --wait` exits 3 one liveness window after, naming ps:0 and its host.
- A `tfcluster stop` from another process ends a `start --wait` (exit 1, "stopped by `tfcluster stop`").
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.monitor.follow import EVERY_S, LIVENESS_WINDOW_S
from orchestrator.run import records as runs
from testkit.sshd import Machines
from tests.helpers.plain_trainer import plain_training
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import (
    cli,
    cli_process,
    records,
    run_processes,
    status_json,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROLES = [["ps"], ["worker"], ["worker"]]  # m0: ps:0, m1: worker:0 (the chief), m2: worker:1
STATUS_SLACK_S = 10.0  # one follower turn: a status over SSH on a loaded 2-core machine
TASK_PY = """\
import os, sys, time
while not os.path.exists(sys.argv[1]):
    sum(range(200_000))  # its CPU time moves: `running` though it reports no progress
    time.sleep(0.2)  # polls for the file that ends it
"""


@contextlib.contextmanager
def machine_killed(machines: Machines, i: int, run_dir: str) -> Iterator[float]:
    """Machine i dies whole: its sshd and sessions, then every process of the run there; back at the end."""
    machines.stop(i)
    at = time.time()
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.environ().get("TFCLUSTER_RUN_DIR") == run_dir:
                p.kill()
    try:
        yield at
    finally:
        machines.start(i)


def started(state_dir: Path) -> str:
    """The run id once `start --wait` has started it (its record says so) and every task runs."""
    record: dict[str, Any] = wait_for(lambda: next((r for r in records(state_dir) if r["status"] == "started"), None),
                                      180, "start to finish starting", interval=0.5)
    run_id: str = record["run_id"]
    wait_for(lambda: all(t["state"] == "running" for t in status_json(state_dir, run_id)[1]["tasks"]), 120,
             "every task running", interval=1.0)
    return run_id


def ended(proc: subprocess.Popen[str], timeout: float) -> tuple[int, str, float]:
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"`start --wait` still following after {timeout:g}s") from None
    return proc.returncode, stderr, time.time()


def test_a_worker_machine_lost_does_not_keep_it_waiting_once_the_chief_finished(
        machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    release = tmp_path / "release"
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=ROLES,
                                training=plain_training(tmp_path, release))
    with cli_process(state_dir, "start", str(hosts), "--wait", "--timeout", "150") as proc:
        run_id = started(state_dir)
        with machine_killed(machines, 2, runs.load(run_id).host("m2").run_dir):
            release.touch()  # the chief finishes by itself (exit 0); m2 stays dead until `start --wait` ends
            code, stderr, exited_at = ended(proc, 400)
        assert code == 0, stderr
        last = stderr.strip().splitlines()[-1]
        assert "finished (worker:1 (host m2) lost on the way)" in last, stderr
    _, st = status_json(state_dir, run_id)
    chief = next(t for t in st["tasks"] if t["name"] == "worker:0")
    assert chief["exit_code"] == 0 and chief["final"], st
    late = exited_at - chief["updated_at"]
    assert late <= 2 * LIVENESS_WINDOW_S + EVERY_S + STATUS_SLACK_S, (late, stderr)


def _stdlib_run(machines: Machines, tmp_path: Path, state_dir: Path) -> Path:
    (tmp_path / "task.py").write_text(TASK_PY)
    return machines.hosts_toml(tmp_path / "hosts.toml", roles=ROLES, training={
        "command": "{python} task.py " + str(tmp_path / "release"), "sync": ["task.py"]})


def test_the_ps_machine_lost_is_exit_3_within_a_liveness_window(machines: Machines, tmp_path: Path,
                                                               state_dir: Path) -> None:
    hosts = _stdlib_run(machines, tmp_path, state_dir)
    with cli_process(state_dir, "start", str(hosts), "--wait") as proc:
        run_id = started(state_dir)
        with machine_killed(machines, 0, runs.load(run_id).host("m0").run_dir) as killed_at:
            code, stderr, exited_at = ended(proc, 120)
    assert code == 3, stderr
    assert "partial: ps:0 (host m0) lost: the run cannot finish without it" in stderr.strip().splitlines()[-1], stderr
    assert exited_at - killed_at <= LIVENESS_WINDOW_S + EVERY_S + 2 * STATUS_SLACK_S, stderr


def test_a_stop_from_another_terminal_ends_start_wait(machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    hosts = _stdlib_run(machines, tmp_path, state_dir)
    with cli_process(state_dir, "start", str(hosts), "--wait") as proc:
        run_id = started(state_dir)
        stopped = cli(state_dir, "stop", run_id, "--grace", "1")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        code, stderr, _ = ended(proc, EVERY_S + 2 * STATUS_SLACK_S)
    assert code == 1, stderr
    assert stderr.strip().splitlines()[-1].endswith("stopped by `tfcluster stop`"), stderr
    assert not run_processes(run_id)
