"""start/status/stop/logs over real sshd on 3 loopback machines, with the user-command path and a
trivial stdlib program as the task: the lifecycle mechanics and the supervisors' policies (restart, a
finisher dead for good, the run's end) without TF's import time. Each mode's TensorFlow behaviour is tested
where TensorFlow is under test: tests/faults, test_tensorboard_sshd.py, test_slurm_lifecycle.py.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.plan.from_file import plan_file
from orchestrator.run import launch
from orchestrator.run import records as runs
from testkit.sshd import Machines
from tests.helpers.output import OutputLines
from tests.helpers.procs import cmdline
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import (
    cli,
    cli_process,
    records,
    run_processes,
    started_run_id,
    status_json,
)
from training.run.layout import host_module

pytestmark = pytest.mark.integration

# The "training program": prints, then ticks until the release file exists (the loopback machines
# share this filesystem, so the test ends the "training" by creating it) or `seconds` have passed;
# worker 1 fails when FAIL_WORKER1 is in argv.
TASK_PY = """\
import os, sys, time
job, task, seconds, release = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
print(f"hello from {job}:{task}", flush=True)
if "FAIL_WORKER1" in sys.argv and job == "worker" and task == "1":
    sys.exit(4)
end, n = time.time() + seconds, 0
while time.time() < end and not os.path.exists(release):
    n += 1
    print(f"tick {job}:{task} {n}", flush=True)
    sum(range(300_000))  # a little work, as training does: its CPU time moves
    time.sleep(0.2)  # polls for the file that ends it (or its time)
"""






def _hosts(machines: Machines, tmp_path: Path, seconds: float, *extra: str, **training: Any) -> Path:
    (tmp_path / "task.py").write_text(TASK_PY)
    args = " ".join([str(seconds), str(tmp_path / "release"), *extra])
    return machines.hosts_toml(tmp_path / "hosts.toml", training={
        "command": "{python} task.py {job} {task} " + args, "sync": ["task.py"], **training})


def gated_python(tmp_path: Path) -> tuple[Path, Path]:
    """A host's python whose launch of the supervisor (`-S -m <module> --detach`, the last step of a start on
    that host: training/launcher.py) waits until the returned gate file exists; every other use runs at once."""
    gate, python = tmp_path / "gate", tmp_path / "gated-python"
    python.write_text(f"#!/bin/sh\nif [ \"$4\" = --detach ]; then while [ ! -e {gate} ]; do sleep 0.05; done; fi\n"
                      f"exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    return python, gate


def test_start_status_finish_and_ship_only_changes(machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    hosts = _hosts(machines, tmp_path, 120.0)
    res = cli(state_dir, "start", str(hosts))
    assert res.returncode == 0, res.stderr
    run_id = started_run_id(res.stdout)
    assert len(run_processes(run_id)) >= 4 + 3  # tasks + one supervisor per host, seen independently
    code, st = status_json(state_dir, run_id)
    assert code == 0
    names = {t["name"]: t for t in st["tasks"]}
    assert set(names) == {"ps:0", "chief:0", "worker:0", "worker:1"}
    assert {t["host"] for t in st["tasks"]} == {"m0", "m1", "m2"}
    assert all(t["pid"] for t in st["tasks"]), st
    # Judged by their CPU (they report no progress): running while it moves.
    wait_for(lambda: all(t["state"] == "running" and t["no_progress_reported"]
                         for t in status_json(state_dir, run_id)[1]["tasks"]), 30, "every task running")

    (tmp_path / "release").touch()  # the "training" ends
    st = wait_for(lambda: (s := status_json(state_dir, run_id)[1])["state"] == "finished" and s, 30, "finished")
    # Each exited by itself, or was ended by the run once the chief finished (success = "chief"): never a
    # failure, never restarted.
    assert all(t["state"] == "exited" and not t["failed"] and t["restarts"] == 0
               and (t["exit_code"] == 0 or t["stopped_by"] == "run") for t in st["tasks"]), st
    assert next(t for t in st["tasks"] if t["name"] == "chief:0")["exit_code"] == 0
    wait_for(lambda: not run_processes(run_id), 10, "every supervisor to exit")
    assert run_id in cli(state_dir, "ls").stdout

    # A second start ships nothing (same bytes); a changed task.py is the only upload.
    plan = plan_file(hosts)
    again = launch.start(plan, str(hosts), launch.StartOptions(timeout=60))
    assert all(o.ok and o.uploaded == 0 and o.shipped > 10 for o in again.outcomes.values())
    (tmp_path / "task.py").write_text(TASK_PY + "# changed\n")  # (release exists: these runs end at once)
    # Its supervisors hold their control ports until they exit: a start on the same ports before that is
    # refused (orchestrator/run/port_check.py).
    wait_for(lambda: not run_processes(again.record.run_id), 60, "the second run to end")
    third = launch.start(plan, str(hosts), launch.StartOptions(timeout=60))
    # The hosts share one workdir (so one cache): the changed file is sent once, or to each host that asked
    # for it before another's copy landed, never more than once to a host.
    uploads = [o.uploaded for o in third.outcomes.values()]
    assert sum(uploads) >= 1 and max(uploads) == 1, uploads
    for rec in (again.record, third.record):
        assert cli(state_dir, "stop", rec.run_id, "--purge").returncode == 0
        assert not run_processes(rec.run_id)
        assert not Path(rec.hosts[0].run_dir).exists()


def test_sigkilled_worker_is_restarted(machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    hosts = _hosts(machines, tmp_path, 120.0)
    res = cli(state_dir, "start", str(hosts), "--run", "restart-test")
    assert res.returncode == 0, res.stderr
    _, st = status_json(state_dir, "restart-test")
    worker1 = next(t for t in st["tasks"] if t["name"] == "worker:1")
    os.kill(worker1["pid"], signal.SIGKILL)  # m2 is this machine too: its pids are ours to see

    def restarted() -> dict[str, Any] | None:
        w = next(t for t in status_json(state_dir, "restart-test")[1]["tasks"] if t["name"] == "worker:1")
        return w if w["restarts"] == 1 and w["state"] == "running" else None

    again = wait_for(restarted, 30, "worker:1 restarted")
    assert again["pid"] != worker1["pid"]
    code, st = status_json(state_dir, "restart-test")
    assert code == 0 and st["state"] == "running"
    assert "restarts" in cli(state_dir, "status", "restart-test").stdout
    stopped = cli(state_dir, "stop", "restart-test")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert not run_processes("restart-test")
    assert cli(state_dir, "stop", "restart-test").returncode == 0  # idempotent
    _, st = status_json(state_dir, "restart-test")
    assert st["state"] == "stopped"


def test_failed_task_makes_status_fail(machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    # Worker 1 exits 4 after it was seen running; `never` restarts it.
    hosts = _hosts(machines, tmp_path, 30.0, "FAIL_WORKER1", restart="never")
    res = cli(state_dir, "start", str(hosts), "--run", "fail-test")
    run_id = "fail-test"
    try:
        if res.returncode != 0:  # it may already have failed while start was waiting: a clear error
            assert "host m2: task-failed: worker:1 exited with exit code 4" in res.stderr, res.stderr
            return
        code, st = wait_for(lambda: (r := status_json(state_dir, run_id))[1]["state"] == "failed" and r, 20, "fail")
        assert code == 1
        w = next(t for t in st["tasks"] if t["name"] == "worker:1")
        assert w["exit_code"] == 4 and w["failed"]
        assert cli(state_dir, "status", run_id).returncode == 1
    finally:
        assert cli(state_dir, "stop", run_id).returncode == 0
        assert not run_processes(run_id)


def test_sigkill_of_start_process_leaves_run_findable_and_stoppable(
    machines: Machines, tmp_path: Path, state_dir: Path
) -> None:
    # m2's launch waits at its gate until `start` was killed: `start` is certainly still waiting on m2 then,
    # after m0's and m1's supervisors were launched (detached: they must survive the kill).
    gated, gate = gated_python(tmp_path)
    (tmp_path / "task.py").write_text(TASK_PY)
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", host_extra={2: {"python": str(gated)}}, training={
        "command": f"{{python}} task.py {{job}} {{task}} 120 {tmp_path / 'release'}", "sync": ["task.py"]})
    with cli_process(state_dir, "start", str(hosts), "--run", "orphaned-start") as proc:
        def m2_launching() -> bool:
            """m0's and m1's supervisors run, and m2's launch is under way (its gated python carries the
            run marker from the launching shell), with `started` on record for every host."""
            rec = records(state_dir)
            started = bool(rec) and all(h["started"] for h in rec[0]["hosts"])
            by_machine: dict[str, list[str]] = {}
            for p in run_processes("orphaned-start"):
                with suppress(psutil.Error):
                    machine = p.environ()["TFCLUSTER_RUN_DIR"].rsplit("/", 1)[-1]  # .../runs/<id>/<host>
                    by_machine.setdefault(machine, []).append(" ".join(p.cmdline()))
            supervised = all(any(host_module("supervisor") in c for c in by_machine.get(h, [])) for h in ("m0", "m1"))
            return started and supervised and bool(by_machine.get("m2"))

        wait_for(m2_launching, 60, "m0, m1 launched and m2 launching", interval=0.05)
        assert proc.poll() is None, "start ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    gate.touch()  # m2's launch goes on without the start process

    def all_running() -> dict[str, Any] | None:
        code, st = status_json(state_dir, "orphaned-start")
        return st if code == 0 and all(t["state"] == "running" for t in st["tasks"]) else None

    st = wait_for(all_running, 30, "every task running without the start process")
    assert st["state"] == "running", st
    assert {t["host"] for t in st["tasks"]} == {"m0", "m1", "m2"}
    assert run_processes("orphaned-start")
    res = cli(state_dir, "stop")  # the latest run, from the record alone
    assert res.returncode == 0, res.stdout + res.stderr
    assert run_processes("orphaned-start") == []


def test_host_down_before_start_fails_naming_it_and_starts_nothing(
    machines: Machines, tmp_path: Path, state_dir: Path
) -> None:
    hosts = _hosts(machines, tmp_path, 120.0)
    machines.stop(2)
    try:
        res = cli(state_dir, "start", str(hosts), "--run", "host-down", "--timeout", "30")
    finally:
        machines.start(2)
    assert res.returncode == 3  # a host could not be reached (tfcluster/exit_codes.py)
    assert "host m2: refused" in res.stderr and "Traceback" not in res.stderr, res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]  # others: progress bars
    assert len(errors) == 1 and errors[0].startswith("error: host m2: refused"), res.stderr
    assert run_processes("host-down") == []
    record = runs.load("host-down")
    assert record.status == "failed-to-start" and not any(h.started for h in record.hosts)


def test_stop_reports_an_unreachable_host_and_is_idempotent(
    machines: Machines, tmp_path: Path, state_dir: Path
) -> None:
    hosts = _hosts(machines, tmp_path, 120.0)
    assert cli(state_dir, "start", str(hosts), "--run", "lost-host").returncode == 0
    machines.stop(2)  # the machine's sshd is gone; its supervisor (detached) keeps running
    try:
        t0 = time.monotonic()
        res = cli(state_dir, "stop", "lost-host", "--timeout", "5", "--grace", "1")
        assert time.monotonic() - t0 < 40  # reported, not hung on
        assert res.returncode == 3  # a host could not be reached (tfcluster/exit_codes.py)
        line = next(x for x in res.stdout.splitlines() if "m2" in x)
        assert "unreachable" in line and "refused" in line, res.stdout
        _code, st = status_json(state_dir, "lost-host")
        assert st["state"] == "partial"
        assert {t["name"]: t["state"] for t in st["tasks"]}["worker:1"] == "unreachable"
        # m2's supervisor (alive: only its sshd is gone) hears from its peers that the run was stopped,
        # and stops its own tasks: the run ends everywhere even where `stop` could not go.
        wait_for(lambda: not run_processes("lost-host"), 30, "m2's supervisor to end the run there too")
    finally:
        machines.start(2)
    assert cli(state_dir, "stop", "lost-host").returncode == 0
    assert run_processes("lost-host") == []
    assert cli(state_dir, "stop", "lost-host", "--purge").returncode == 0  # again: nothing left, dirs removed
    assert not Path(machines.workdir(2), "runs", "lost-host").exists()  # every host's part, and the run's dir


def test_logs_follow_streams_lines_reconnects_and_ends_on_ctrl_c(
    machines: Machines, tmp_path: Path, state_dir: Path
) -> None:
    hosts = _hosts(machines, tmp_path, 120.0)
    assert cli(state_dir, "start", str(hosts), "--run", "logs-test").returncode == 0
    try:
        plain = cli(state_dir, "logs", "logs-test", "ps:0")
        assert "ps:0@m0 hello from ps:0" in plain.stdout.splitlines()
        with cli_process(state_dir, "logs", "logs-test", "worker:1", "-f") as proc:
            out = OutputLines(proc.stdout)
            shown = out.expect("worker:1@m2 tick worker:1 ", 5)
            # The SSH connection to m2 is lost (its sshd and sessions die); the task goes on (detached)
            # and writes two more ticks while nobody can read them.
            machines.stop(2)
            out.expect("-- worker:1@m2: host m2:")
            log = Path(runs.load("logs-test").host("m2").run_dir, "logs", "worker-1.log")
            last_shown = int(shown[-1].rsplit(" ", 1)[1])
            wait_for(lambda: f"tick worker:1 {last_shown + 2}\n" in log.read_text(), 30, "ticks while m2 is away")
            machines.start(2)
            out.expect("worker:1@m2 tick worker:1 ", 3)  # streaming again, after a reconnect with backoff
            os.kill(proc.pid, signal.SIGINT)
            assert proc.wait(timeout=10) == 0
        # The reconnect resumed after the last line shown: every tick once, none lost while m2 was away.
        ticks = [int(line.rsplit(" ", 1)[1]) for line in out.seen if line.startswith("worker:1@m2 tick worker:1 ")]
        assert ticks == list(range(1, len(ticks) + 1)), ticks
    finally:
        machines.start(2)
        assert cli(state_dir, "stop", "logs-test").returncode == 0
    assert run_processes("logs-test") == []


def test_ctrl_c_during_start_stops_what_was_started(machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    # m2's launch waits at a gate never opened, so `start` is certainly still launching there when Ctrl-C
    # comes (the tasks alone cannot hold it: a missing program is `running` for an instant after each
    # spawn); the stop that Ctrl-C makes must end that launch too.
    gated, _ = gated_python(tmp_path)
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", host_extra={2: {"python": str(gated)}},
                                training={"command": "/nonexistent/prog {job}", "max_restarts": 50})
    with cli_process(state_dir, "start", str(hosts), "--run", "ctrl-c") as proc:
        wait_for(lambda: (r := records(state_dir)) and all(h["started"] for h in r[0]["hosts"]), 60, "launch")
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "nothing of it is left running" in err, err
    assert run_processes("ctrl-c") == []


def test_connection_lost_mid_start_is_retried_without_a_second_supervisor(
    machines: Machines, tmp_path: Path, state_dir: Path
) -> None:
    """On m1, the connection drops right after the host prepared the run and right after it launched the
    supervisor (the rest of the answer never arrives). Start reconnects and retries both; the retried
    launch finds the supervisor the first attempt started (its lock on the host) instead of starting another.

    The loss is injected at those two exact moments of the host's start command, which a real network
    fault cannot be timed to: the connection is really closed (the retry must open a new one) and the
    steps really ran."""
    from orchestrator.errors import HostError
    from orchestrator.plan.model import HostPlan
    from orchestrator.transport.base import Session
    from orchestrator.transport.factory import transport_for
    from orchestrator.transport.ssh import SSHTransport

    dropped: list[str] = []

    class DropsOnce(SSHTransport):
        def open_session(self, command: str) -> Session:
            inner = super().open_session(command)
            transport = self

            class Dropping:
                host = inner.host
                send, close, close_input = inner.send, inner.close, inner.close_input

                def read_line(self, timeout: float) -> str | None:
                    line = inner.read_line(timeout)
                    step = "prepare" if (line or "").startswith("@prepared") else \
                        "launch" if (line or "").startswith("PID ") else None
                    if transport.host == "m1" and step is not None and step not in dropped:
                        dropped.append(step)
                        transport.close()
                        raise HostError(transport.host, "lost", f"injected: connection lost after the {step} step")
                    return line

                @property
                def exit_code(self) -> int | None:
                    return inner.exit_code

                @property
                def stderr_tail(self) -> str:
                    return inner.stderr_tail

            return Dropping()

    def opener(host: HostPlan) -> SSHTransport:
        real = transport_for(host)
        assert isinstance(real, SSHTransport)
        return DropsOnce(real.host, real.settings)

    hosts = _hosts(machines, tmp_path, 120.0)
    result = launch.start(plan_file(hosts), str(hosts), launch.StartOptions(timeout=60, run_name="lost-conn"),
                          opener=opener)
    try:
        assert dropped == ["prepare", "launch"]
        assert all(o.ok for o in result.outcomes.values())
        def supervisors_only() -> list[Any] | None:
            """`-m <package>.supervisor` processes (not a launcher whose source merely names it); a launcher
            of the dropped connection may take a moment to notice and exit."""
            found = [p for p in run_processes("lost-conn") if host_module("supervisor") in cmdline(p)]
            return found if len(found) == 3 else None

        supervisors = wait_for(supervisors_only, 15, "one supervisor per host")
        on_m1 = [p for p in supervisors if p.environ()["TFCLUSTER_RUN_DIR"].endswith("/m1")]
        assert len(on_m1) == 1, [cmdline(p) for p in supervisors]
        assert on_m1[0].pid == result.outcomes["m1"].supervisor_pid
        _, st = status_json(state_dir, "lost-conn")
        assert all(t["state"] == "running" and t["restarts"] == 0 for t in st["tasks"]), st
    finally:
        assert cli(state_dir, "stop", "lost-conn").returncode == 0
        assert not run_processes("lost-conn")


@pytest.mark.parametrize(("mode", "victim"), [("between-graph", "worker:1"), ("in-graph", "chief:0")])
def test_finisher_dead_for_good_still_lets_the_run_end(
    machines: Machines, tmp_path: Path, state_dir: Path, mode: str, victim: str
) -> None:
    """A between-graph worker, or the in-graph client, SIGKILLed with `restart = "never"`: it never sends its
    done token, but its supervisor tells its peers it failed for good, so every supervisor ends its tasks and
    the run ends by itself, failed; `status` says so (exit code 1), naming the dead task. The supervisors'
    policy, whatever the program: the tasks are TASK_PY, which would tick on for 120 s."""
    roles = [["ps"], ["worker"], ["worker"]] if mode == "between-graph" else [["ps"], ["chief", "worker"], ["worker"]]
    (tmp_path / "task.py").write_text(TASK_PY)
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=roles, mode=mode, training={
        "command": f"{{python}} task.py {{job}} {{task}} 120 {tmp_path / 'release'}", "sync": ["task.py"],
        "restart": "never"})
    res = cli(state_dir, "start", str(hosts))
    assert res.returncode == 0, res.stderr
    run_id = started_run_id(res.stdout)
    dead = next(t for t in status_json(state_dir, run_id)[1]["tasks"] if t["name"] == victim)
    os.kill(dead["pid"], signal.SIGKILL)

    def ended() -> dict[str, Any] | None:
        _, st = status_json(state_dir, run_id)
        return st if st["state"] in ("finished", "failed") and all(t["final"] for t in st["tasks"]) else None

    st = wait_for(ended, 60, f"run {run_id} to end by itself", interval=0.5)
    wait_for(lambda: not run_processes(run_id), 30, "every process of the run to exit")
    by_name = {t["name"]: t for t in st["tasks"]}
    assert by_name[victim]["signal"] == signal.SIGKILL and by_name[victim]["failed"], st
    assert not any(t["failed"] for name, t in by_name.items() if name != victim), st
    assert st["state"] == "failed"
    assert status_json(state_dir, run_id)[0] == 1
    assert by_name["ps:0"]["stopped_by"] == "run"  # ended by its supervisor, told by the victim's


def test_the_mode_flag_overrides_the_file_and_an_in_graph_run_finishes(
    machines: Machines, tmp_path: Path, state_dir: Path
) -> None:
    """`start --mode in-graph` of a between-graph file: the run is in-graph (its record and its tasks: a
    client chief:0 beside the workers), and once the tasks' program ends the run is `finished`, each task
    exited 0 or ended by the run. (The built-in in-graph model to `finished`: tests/integration/
    test_slurm_lifecycle.py.)"""
    (tmp_path / "task.py").write_text(TASK_PY)
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps"], ["chief", "worker"], ["worker"]],
                                mode="between-graph", training={
        "command": f"{{python}} task.py {{job}} {{task}} 120 {tmp_path / 'release'}", "sync": ["task.py"]})
    res = cli(state_dir, "start", str(hosts), "--mode", "in-graph")
    assert res.returncode == 0, res.stderr
    run_id = started_run_id(res.stdout)
    assert runs.load(run_id).mode == "in-graph"
    _, st = status_json(state_dir, run_id)
    assert {t["name"] for t in st["tasks"]} == {"ps:0", "chief:0", "worker:0", "worker:1"}
    (tmp_path / "release").touch()
    st = wait_for(lambda: (s := status_json(state_dir, run_id)[1])["state"] == "finished" and s, 30, "finished")
    assert all(t["exit_code"] == 0 or t["stopped_by"] == "run" for t in st["tasks"]), st
    wait_for(lambda: not run_processes(run_id), 15, "every process of the run to exit")
