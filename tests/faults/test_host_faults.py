"""Faults of whole hosts in one live between-graph run (ps:0 on m0, worker:0 = the chief on m1, worker:1
on m2; real sshd on 3 loopback machines), in file order: m2's supervisor SIGKILLed (and then its orphaned
worker), then machine m1 killed whole (its supervisor and its tasks at once); then `tfcluster stop` must
leave nothing on any host.

These are faults of tfcluster's supervisors and hosts, not of TensorFlow: every task runs the plain trainer
(tests/helpers/plain_trainer.py, through `[training] command`, as users' own programs run): ps:0 holds the
global step, the workers step it and report their progress through tfcluster_report, which is what the
stages read (tests/faults/measure.py).

A host whose supervisor is gone has nobody to restart or report its tasks: `status` must say `lost` for
a task whose supervisor and processes are gone and exit 3 (tfcluster/exit_codes.py), never `running`.
The run cannot finish without its chief, so it ends by `stop` here.

These stages cannot restore what they broke: a lost task stays lost, that is the fault. So each stage
waits for what it needs of the run (wait_healthy on the tasks it does not expect lost yet) and touches
only other hosts than the stage before: a failed first stage (m2) leaves m0 and m1 to the second, and
`stop` works on whatever is left.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from testkit.sshd import Machines
from tests.faults import measure
from tests.faults.cluster import FaultRun, kill, started_run
from tests.helpers.plain_trainer import plain_training
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import cli

pytestmark = [pytest.mark.integration, pytest.mark.faults]

RUN = "host faults"


@pytest.fixture(scope="module")
def run(machines: Machines, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultRun]:
    tmp = tmp_path_factory.mktemp("faults-hosts")
    with started_run(machines, tmp, label=RUN, steps=10**7, program=plain_training(tmp)) as fr:
        fr.wait_all_train()
        yield fr


def lost(run: FaultRun, task: str) -> dict[str, Any] | None:
    code, st = run.status()
    return {"code": code, "st": st} if run.task(task, st)["state"] == "lost" else None


def test_supervisor_sigkill_then_its_task_is_lost(run: FaultRun) -> None:
    """SIGKILL of m2's supervisor alone: its worker is not in its way (it trains on, orphaned) and
    `status` says the supervisor is gone; once that worker dies too, nobody restarts it: `status` says
    `lost` for it and exits 3. The chief trains on meanwhile. (The worker is its command's shell and the
    program under it: both die.)"""
    run.wait_healthy()
    with run.measuring("SIGKILL supervisor of m2, then its orphaned worker:1") as m:
        st = run.status()[1]
        sup_pid = run.host("m2", st)["supervisor_pid"]
        worker_pids = run.task_pids("worker-1#")
        assert run.task("worker:1", st)["pid"] in worker_pids, (st, worker_pids)
        at = kill(sup_pid, signal.SIGKILL)
        wait_for(lambda: not run.host("m2", run.status()[1])["supervisor_alive"], 60, "status to see m2's supervisor gone")
        m["supervisor_gone_seen_s"] = round(time.time() - at, 1)
        m["tasks_outlive_supervisor"] = all(psutil.pid_exists(pid) for pid in worker_pids)
        if m["tasks_outlive_supervisor"]:
            run.wait_trains("worker:1", time.time())  # still training, orphaned
            worker_at = time.time()
            for pid in worker_pids:
                kill(pid, signal.SIGKILL)
        else:
            worker_at = at
        seen = wait_for(lambda: lost(run, "worker:1"), 60, "status to say worker:1 lost", interval=0.5)
        m["lost_seen_s"] = round(time.time() - worker_at, 1)
        m["status_exit"] = seen["code"]
        assert seen["code"] == 3, seen["st"]
        assert not run.task_pids("worker-1#"), "worker:1 was started again with no supervisor"
        run.wait_trains("worker:0", worker_at)  # the chief goes on
        m["steps_lost"] = measure.steps_lost(run.points(), at)
        assert m["steps_lost"] <= measure.JITTER


def test_whole_machine_killed_its_tasks_are_lost(run: FaultRun) -> None:
    """Machine m1 dies: its supervisor and every process of the run on it SIGKILLed at once (sshd stays
    up: the machine is back, empty). `status` says `lost` for its task, and exits 3."""
    run.wait_healthy(("ps:0", "worker:0"))  # worker:1 is lost by now (the stage above), or not
    with run.measuring("whole machine m1 killed (supervisor + tasks)") as m:
        m1_dir = run.run_dir("m1")
        victims = []
        for p in run.processes():
            with contextlib.suppress(psutil.Error):
                if p.environ().get("TFCLUSTER_RUN_DIR") == m1_dir:
                    victims.append(p)
        assert len(victims) >= 2, victims  # the supervisor and the chief at least
        at = time.time()
        for p in victims:
            with contextlib.suppress(psutil.Error):
                p.kill()
        seen = wait_for(lambda: lost(run, "worker:0"), 60, "status to say worker:0 lost", interval=0.5)
        m["lost_seen_s"] = round(time.time() - at, 1)
        m["status_exit"] = seen["code"]
        m["processes_killed"] = len(victims)
        assert seen["code"] == 3, seen["st"]
        assert run.task("ps:0", seen["st"])["state"] == "running", seen["st"]


def test_stop_leaves_nothing(run: FaultRun) -> None:
    """`tfcluster stop` on the run with two hosts' tasks lost: what still runs (the PS) is stopped and
    nothing of the run is left on any host."""
    with run.measuring("stop after lost hosts") as m:
        at = time.monotonic()
        res = cli(run.state, "stop", run.run_id, "--grace", "2")
        m["stop_exit"] = res.returncode
        m["stop_s"] = round(time.monotonic() - at, 1)
        m["stop_said"] = [" ".join(line.replace("│", " ").split()) for line in res.stdout.splitlines()
                          if line.startswith("│")]
        assert res.returncode == 0, res.stdout + res.stderr
        m["processes_left"] = len(run.processes())
        assert m["processes_left"] == 0, run.processes()
