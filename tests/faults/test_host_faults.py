"""Faults of tfcluster's own machinery in one live between-graph run (ps:0 on m0, worker:0 = the chief on m1,
worker:1 on m2; real sshd on 3 loopback machines), in file order. First those each stage restores: a second
run on the same ports (refused before anything starts), worker:1 SIGSTOPped past the liveness window then
continued, m2's sshd stopped and started, the live dashboard SIGKILLed; then the faults of whole hosts: m2's
supervisor SIGKILLed (and then its orphaned worker), then machine m1 killed whole (its supervisor and its
tasks at once); then `tfcluster stop` must leave nothing on any host.

These are faults of tfcluster's supervisors and hosts, not of TensorFlow: every task runs the plain trainer
(tests/helpers/plain_trainer.py, through `[training] command`, as users' own programs run): ps:0 holds the
global step, the workers step it and report their progress through tfcluster_report, which is what the
stages read (tests/faults/measure.py).

A host whose supervisor is gone has nobody to restart or report its tasks: `status` must say `lost` for
a task whose supervisor and processes are gone and exit 3 (tfcluster/exit_codes.py), never `running`.
The run cannot finish without its chief, so it ends by `stop` here.

The host stages cannot restore what they broke: a lost task stays lost, that is the fault. So each stage
waits for what it needs of the run (wait_healthy on the tasks it does not expect lost yet) and touches
only other hosts than the stage before: a failed first stage (m2) leaves m0 and m1 to the second, and
`stop` works on whatever is left.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from testkit.sshd import Machines
from tests.faults import measure
from tests.faults.cluster import FaultRun, kill, started_run
from tests.faults.probes import agents_of, dash_once
from tests.helpers.plain_trainer import plain_training
from tests.helpers.terminal import Terminal
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import REPO, cli, cli_env, kill_run, run_processes

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


def test_second_run_on_the_same_ports_does_not_touch_the_first(run: FaultRun) -> None:
    """A second `start` of the same hosts.toml (same hosts, same ports) while the first runs: `start`'s
    port pre-check refuses it before anything starts (exit 2, one line naming a host and a port: issue
    14 #2, which once killed the first run's PS); the first run loses nothing (no restart, its PS the
    same process, its global step moving on)."""
    run.wait_healthy()
    with run.measuring("second run, same hosts and ports") as m:
        run.assert_time_left(1000)
        before = run.status()[1]
        ps_pid = run.task("ps:0", before)["pid"]
        at = time.time()
        try:
            res = cli(run.state, "start", str(run.hosts_toml), "--run", "second", "--timeout", "90")
        finally:  # a second run that started anyway would hold ports the stages after this one need
            started = run_processes("second")
            if started:
                cli(run.state, "stop", "second", "--grace", "1")
                kill_run("second")
        m["second_judged_s"] = round(time.time() - at, 1)
        m["second_start_exit"] = res.returncode
        reason = re.search(r"host \S+: port \d+[^\n]*", res.stderr)
        m["second_said"] = reason.group(0)[:200] if reason else (res.stdout + res.stderr)[-200:]
        assert res.returncode == 2 and reason, res.stdout + res.stderr
        assert not started, f"the refused run started {len(started)} processes"
        after = run.status()[1]
        assert run.task("ps:0", after)["pid"] == ps_pid and after["state"] == "running", after
        assert {t["name"]: t["restarts"] for t in after["tasks"]} == {t["name"]: t["restarts"] for t in before["tasks"]}
        now = time.time()
        run.wait_trains("worker:0", now, above_local=0)
        m["steps_lost"] = measure.steps_lost(run.points(), at)
        assert m["steps_lost"] <= measure.JITTER


def test_worker_sigstop_is_stalled_then_resumes(run: FaultRun) -> None:
    """SIGSTOP of worker:1 beyond the liveness window: `dash --once --json` says `stalled` (exit 0: a
    stalled task is alive, exit_codes.py) and `status` agrees, nothing restarts it; SIGCONT and it trains
    on (20 steps more) from where it was (same processes), and the chief never stopped. recover_s: SIGCONT
    to its 20th step."""
    run.wait_healthy()
    with run.measuring("SIGSTOP worker:1, then SIGCONT") as m:
        run.assert_time_left(1000)
        before = run.restarts()
        stopped = run.task_pids("worker-1#")  # the command's shell and the program under it: the task
        at = time.time()
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        try:
            def stalled() -> dict[str, Any] | None:
                code, st = dash_once(run)
                task = next(t for t in st["tasks"] if t["name"] == "worker:1")
                return {"code": code, "state": st} if task["state"] == "stalled" else None

            seen = wait_for(stalled, 90, "dash to say worker:1 stalled", interval=0.5)
            m["stalled_seen_s"] = round(time.time() - at, 1)
            m["dash_exit"] = seen["code"]
            assert seen["code"] == 0
            code, st = run.status()  # the same reducer judges `status`: it agrees, and exits 0 (documented)
            m["status_said"] = f"{run.task('worker:1', st)['state']}, exit {code}"
            assert (run.task("worker:1", st)["state"], code) == ("stalled", 0), st
            last_local = max(p.local_step for p in run.points() if p.task == "worker:1" and p.t <= at)
        finally:
            resumed_at = time.time()
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
        # Resumed: it goes on stepping (20 steps of its own), not just finishing the step it was in.
        back = run.wait_trains("worker:1", resumed_at, above_local=last_local + 20)
        m["recover_s"] = round(back.t - resumed_at, 1)
        m["steps_lost"] = measure.steps_lost(run.points(), at)
        assert m["steps_lost"] <= measure.JITTER
        assert measure.first_step_after(run.points(), at, "worker:0") is not None
        assert run.restarts() == before


def test_sshd_stopped_and_started_again(run: FaultRun) -> None:
    """m2's sshd dies (its sessions too) and comes back: meanwhile `status` says m2's task is
    `unreachable` and exits 3; afterwards it recovers (exit 0). The detached supervisor and worker:1
    never noticed: worker:1 stepped throughout and was not restarted."""
    run.wait_healthy()
    with run.measuring("sshd of m2 stopped, then started") as m:
        run.assert_time_left(1000)
        before = run.restarts()
        at = time.time()
        run.machines.stop(2)
        try:
            code, st = run.status()
            m["status_exit_during"] = code
            assert code == 3, st
            assert run.task("worker:1", st)["state"] == "unreachable", st
            assert run.task("worker:0", st)["state"] != "unreachable", st
        finally:
            back_at = time.time()
            run.machines.start(2)
        down = (at, back_at)
        code = wait_for(lambda: run.status()[0] == 0 or None, 60, "status to exit 0 again", interval=0.5)
        m["recover_s"] = round(time.time() - back_at, 1)
        assert code
        during = [p for p in run.points() if p.task == "worker:1" and down[0] < p.t < down[1]]
        m["worker1_events_while_down"] = len(during)
        assert during, "worker:1 reported nothing while its sshd was down"
        m["steps_lost"] = measure.steps_lost(run.points(), at)
        assert m["steps_lost"] <= measure.JITTER
        assert run.restarts() == before


def test_dashboard_sigkill_leaves_the_run_untouched(run: FaultRun) -> None:
    """The live dashboard (in a terminal) SIGKILLed while its agents stream: the agents it started on the
    hosts end by themselves (their SSH sessions closed), and the run goes on untouched."""
    run.wait_healthy()
    with run.measuring("SIGKILL tfcluster dash") as m:
        run.assert_time_left(1000)
        before = run.restarts()
        launched = time.monotonic()
        dash = Terminal([sys.executable, "-m", "tfcluster", "dash", run.run_id], cli_env(run.state), REPO, 160, 48)
        try:  # its screen is read while the test waits: a pty nobody reads would block the app
            agents = wait_for(lambda: dash.read(0) or (len(agents_of(run)) == 3 and agents_of(run)), 90,
                              "the dashboard's 3 agents")
            m["agents_up_s"] = round(time.monotonic() - launched, 1)
            at = kill(dash.proc.pid, signal.SIGKILL)
            dash.proc.wait(10)
            gone = psutil.wait_procs(agents, timeout=60)[1]
            m["agents_left"] = len(gone)
            m["agents_gone_s"] = round(time.time() - at, 1)
            assert not gone, gone
        finally:
            dash.close()
            for agent in agents_of(run):  # agents that outlived their dashboard (the failure above)
                with contextlib.suppress(psutil.Error):
                    agent.kill()
        run.wait_trains("worker:1", time.time())
        m["steps_lost"] = measure.steps_lost(run.points(), at)
        assert m["steps_lost"] <= measure.JITTER
        assert run.restarts() == before


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
        # ps:0's host and supervisor live: never lost. With both workers gone nothing steps it, so once a
        # liveness window has passed (a loaded machine's status can come later) it is rightly `stalled`.
        assert run.task("ps:0", seen["st"])["state"] in ("running", "stalled"), seen["st"]


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
