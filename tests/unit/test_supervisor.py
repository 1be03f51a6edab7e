"""The supervisor with trivial stdlib programs: restarts with backoff, max_restarts, SIGTERM, no orphans.

Real processes, real files; the "tasks" are tiny `python -c` programs instead of TensorFlow.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.run.read_host import HostReading, decode, read_script
from orchestrator.transport.base import CommandResult
from tests.helpers.procs import stop_run_dir, wait_gone
from tests.helpers.supervisor_runs import (
    REPO,
    UNTIL_STOPPED,
    make_run,
    read_task_state,
    run_pids,
    start_supervisor,
    supervisor_events,
    task_spec,
)
from tests.helpers.waiting import wait_for
from training.run.layout import RUN_DIR_ENV, RunLayout
from training.supervisor.core import DEFAULTS


def test_tasks_that_exit_zero_finish_the_supervisor(tmp_path: Path, cleanup: Any) -> None:
    layout = make_run(tmp_path, [task_spec("ps", 0, "print('ps ok')"), task_spec("worker", 0, "print('w ok')"),
                                  task_spec("worker", 1, "print('other host')", host="h2")])
    sup = start_supervisor(layout)
    cleanup[0].append(sup)
    assert sup.wait(timeout=20) == 0
    for job in ("ps", "worker"):
        st = read_task_state(layout, job, 0)
        assert st["state"] == "exited" and st["exit_code"] == 0 and st["restarts"] == 0 and st["final"]
    assert not Path(layout.task_state_file("worker", 1)).exists()  # h2's task is not ours
    assert "ps ok" in Path(layout.log_file("ps", 0)).read_text()
    sup_state = json.loads(Path(layout.supervisor_state_file("h1")).read_text())
    assert sup_state["state"] == "finished" and sup_state["pgid"] == sup_state["pid"] == sup.pid
    states = [(e["job"], e["state"]) for e in supervisor_events(layout) if e["kind"] == "task_state"]
    assert ("ps", "running") in states and ("ps", "exited") in states


def test_failing_task_restarts_with_backoff_until_max_restarts(tmp_path: Path, cleanup: Any) -> None:
    layout = make_run(tmp_path, [task_spec("worker", 0, "import sys; sys.exit(3)")], max_restarts=3, backoff=0.2)
    sup = start_supervisor(layout)
    cleanup[0].append(sup)
    assert sup.wait(timeout=20) == 1
    st = read_task_state(layout, "worker", 0)
    assert st["state"] == "exited" and st["exit_code"] == 3 and st["restarts"] == 3 and st["final"]
    starts = [e["t"] for e in supervisor_events(layout) if e["state"] == "running"]
    assert len(starts) == 4
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # Backoff doubles: 0.2, 0.4, 0.8 s (lower bounds only; a busy machine may be slower).
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4 and gaps[2] >= 0.8
    assert json.loads(Path(layout.supervisor_state_file("h1")).read_text())["state"] == "failed"


def test_restart_never_policy(tmp_path: Path, cleanup: Any) -> None:
    layout = make_run(tmp_path, [task_spec("worker", 0, "import sys; sys.exit(5)")], restart="never")
    sup = start_supervisor(layout)
    cleanup[0].append(sup)
    assert sup.wait(timeout=20) == 1
    st = read_task_state(layout, "worker", 0)
    assert st["restarts"] == 0 and st["exit_code"] == 5


def test_killed_task_is_restarted_then_finishes(tmp_path: Path, cleanup: Any) -> None:
    # First attempt sleeps (to be killed), the restarted one exits 0.
    code = ("import os, sys, time\n"
            "if os.environ['TFCLUSTER_TASK_ID'].endswith('#0'): time.sleep(60)\n")
    layout = make_run(tmp_path, [task_spec("worker", 0, code)])
    sup = start_supervisor(layout)
    cleanup[0].append(sup)
    wait_for(lambda: read_task_state(layout, "worker", 0).get("state") == "running", 10, "worker-0 running")
    os.kill(read_task_state(layout, "worker", 0)["pid"], signal.SIGKILL)
    assert sup.wait(timeout=20) == 0
    st = read_task_state(layout, "worker", 0)
    assert st["restarts"] == 1 and st["exit_code"] == 0
    assert st["history"][0]["signal"] == signal.SIGKILL


def test_sigterm_stops_children_including_sh_grandchildren(tmp_path: Path, cleanup: Any) -> None:
    ignores_term = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
                    "time.sleep(60)")
    sh_task = {"job": "worker", "index": 1, "host": "h1", "env": {},
               "command": ["/bin/sh", "-c", f"{sys.executable} -c 'import time; time.sleep(60)'; echo after"]}
    layout = make_run(tmp_path, [task_spec("ps", 0, ignores_term), sh_task], grace=0.5)
    cleanup[1].append(layout.root)
    sup = start_supervisor(layout)
    cleanup[0].append(sup)
    wait_for(lambda: len(run_pids(layout.root)) >= 4, 10, "the supervisor, ps-0, sh and its python")
    wait_for(lambda: "ready" in Path(layout.log_file("ps", 0)).read_text(), 10, "ps-0 to say ready")
    os.kill(sup.pid, signal.SIGTERM)
    assert sup.wait(timeout=10) == 0
    wait_for(lambda: not run_pids(layout.root), 3, "every process of the run gone")
    assert json.loads(Path(layout.supervisor_state_file("h1")).read_text())["state"] == "stopped"
    assert read_task_state(layout, "ps", 0)["signal"] == signal.SIGKILL  # it ignored TERM, so the grace ran out


def _read(layout: RunLayout) -> HostReading:
    """`status`'s read of the host (orchestrator/run/read_host.py) under this machine's /bin/sh."""
    done = subprocess.run(["/bin/sh", "-c", read_script(layout.root, "h1")], capture_output=True, text=True,
                          timeout=30, check=True)
    return decode("h1", CommandResult("h1", "read", 0, done.stdout, done.stderr, 0.0))


def test_stop_kills_everything_even_after_supervisor_was_killed(tmp_path: Path, cleanup: Any) -> None:
    layout = make_run(tmp_path, [task_spec("worker", 0, UNTIL_STOPPED),
                                  task_spec("worker", 1, UNTIL_STOPPED)])
    sup = start_supervisor(layout)
    cleanup[0].append(sup)
    wait_for(lambda: len(run_pids(layout.root)) >= 3, 10, "the supervisor and both tasks")
    os.kill(sup.pid, signal.SIGKILL)  # its tasks are orphaned but still marked
    sup.wait()
    assert len(run_pids(layout.root)) == 2
    seen = _read(layout)
    assert seen.supervisor_alive is False and seen.processes is not None and len(seen.processes) == 2
    assert {p.task.split("#")[0] for p in seen.processes} == {"worker-0", "worker-1"}
    result = stop_run_dir(layout.root)
    assert result.remaining == () and len(result.terminated) == 2 and result.killed == ()  # SIGTERM was enough
    assert run_pids(layout.root) == []
    assert stop_run_dir(layout.root).remaining == ()  # idempotent


# ---- --detach: what `start` runs on every host --------------------------------------------------------

def _detach(layout: RunLayout, host: str = "h1", timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    """As `start` runs it: -S, the run marker set by the caller, in the code dir."""
    env = {**os.environ, "PYTHONPATH": str(REPO), RUN_DIR_ENV: layout.root}
    return subprocess.run([sys.executable, "-S", "-m", "training.supervisor", "--detach", "--run-dir", layout.root,
                           "--host", host, "--ready-timeout", "10"], check=False, env=env, cwd=layout.code,
                          capture_output=True, text=True, timeout=timeout)


def _report(out: str) -> tuple[int, dict[str, dict[str, Any]], bool]:
    lines = out.splitlines()
    pid = int(lines[0].split()[1])
    states = {}
    for line in lines[1:]:
        if line.startswith("{"):
            data = json.loads(line)
            states[data.get("kind") + ":" + str(data.get("job", data.get("host")))] = data
    return pid, states, "ALIVE" in lines


def test_detach_reports_a_running_supervisor_in_its_own_session(tmp_path: Path, cleanup: Any) -> None:
    layout = make_run(tmp_path, [task_spec("ps", 0, UNTIL_STOPPED),
                                  task_spec("worker", 0, UNTIL_STOPPED)])
    cleanup[1].append(layout.root)
    result = _detach(layout)
    assert result.returncode == 0, result.stderr
    pid, states, alive = _report(result.stdout)
    # The launcher has exited; its report was written once every task had been spawned.
    assert alive and states["supervisor:h1"]["state"] == "running" and states["supervisor:h1"]["pid"] == pid
    assert states["task_state:ps"]["state"] == states["task_state:worker"]["state"] == "running"
    sup = psutil.Process(pid)
    assert os.getsid(pid) == pid and os.getpgid(pid) == pid  # own session, group leader
    assert sup.ppid() != os.getpid()  # detached: not our child any more (the launcher exited)
    tasks = [psutil.Process(states[f"task_state:{j}"]["pid"]) for j in ("ps", "worker")]
    assert all(os.getpgid(t.pid) == pid for t in tasks)  # in the supervisor's group: stop kills it
    assert all(t.environ()[RUN_DIR_ENV] == layout.root for t in [sup, *tasks])
    assert all(Path(t.cwd()) == Path(layout.code) for t in tasks)


def test_detach_twice_reports_the_running_supervisor_instead_of_a_second(tmp_path: Path, cleanup: Any) -> None:
    """A launch retried after a lost connection must not start a second supervisor (the lock)."""
    layout = make_run(tmp_path, [task_spec("worker", 0, UNTIL_STOPPED)])
    cleanup[1].append(layout.root)
    first = _report(_detach(layout).stdout)
    second = _report(_detach(layout).stdout)
    assert first[0] == second[0] and second[2]
    supervisors = [p for p in run_pids(layout.root) if "training.supervisor" in " ".join(psutil.Process(p).cmdline())]
    assert supervisors == [first[0]]
    assert stop_run_dir(layout.root).remaining == ()
    # The lock died with the supervisor: a new launch starts a new one.
    third = _report(_detach(layout).stdout)
    assert third[0] != first[0] and third[2]


def test_detach_when_the_supervisor_fails_at_once(tmp_path: Path, cleanup: Any) -> None:
    layout = make_run(tmp_path, [task_spec("worker", 0, "import sys; sys.exit(4)")], restart="never")
    cleanup[1].append(layout.root)
    result = _detach(layout)
    pid, _states, _ = _report(result.stdout)
    wait_for(lambda: read_task_state(layout, "worker", 0).get("final") is True, 10, "worker-0 final")
    assert read_task_state(layout, "worker", 0)["exit_code"] == 4
    wait_gone(pid)


def test_missing_program_is_exit_127_with_the_reason_in_its_log(tmp_path: Path, cleanup: Any) -> None:
    task = {"job": "worker", "index": 0, "host": "h1", "env": {}, "command": ["/nonexistent/program", "--x"]}
    layout = make_run(tmp_path, [task], restart="never")
    sup = start_supervisor(layout)
    cleanup[0].append(sup)
    assert sup.wait(timeout=20) == 1
    st = read_task_state(layout, "worker", 0)
    assert st["exit_code"] == 127 and st["final"]
    assert "cannot start worker:0" in Path(layout.log_file("worker", 0)).read_text()


def test_tasks_get_default_signal_dispositions_and_the_home_python(tmp_path: Path, cleanup: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The supervisor ignores SIGHUP (and Python ignores SIGPIPE); its tasks must not inherit that
    (read from the kernel: a Python task would set SIGPIPE to ignored again itself). A program given
    as `~/...` (hosts.toml `python = "~/venv/bin/python"`) is the remote home's."""
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "py").symlink_to(sys.executable)
    grep = {"job": "worker", "index": 0, "host": "h1", "env": {}, "command": ["grep", "SigIgn", "/proc/self/status"]}
    home_py = {"job": "worker", "index": 1, "host": "h1", "env": {},
               "command": ["~/bin/py", "-S", "-c", "print('home python ran')"]}
    layout = make_run(tmp_path, [grep, home_py])
    monkeypatch.setenv("HOME", str(home))
    sup = start_supervisor(layout)
    cleanup[0].append(sup)
    assert sup.wait(timeout=20) == 0
    ignored = int(Path(layout.log_file("worker", 0)).read_text().split("SigIgn:")[1].split()[0], 16)
    for sig in (signal.SIGHUP, signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & (1 << (sig - 1)), f"{sig.name} is ignored in the task"
    assert "home python ran" in Path(layout.log_file("worker", 1)).read_text()


def test_tasks_run_niced_and_their_threads_and_children_too(tmp_path: Path, cleanup: Any) -> None:
    """Training saturates the cores; sshd and the status and stop scripts must still answer at once: the
    supervisor lowers its tasks' priority by DEFAULTS["nice"] and keeps its own."""
    code = ("import os, subprocess, sys, threading, time\n"
            "child = subprocess.Popen(['sleep', '60'])\n"
            "t = threading.Thread(target=time.sleep, args=(60,), daemon=True); t.start()\n"
            "print('ready', child.pid, threading.get_native_id(), t.native_id, flush=True)\n"
            "time.sleep(60)\n")
    layout = make_run(tmp_path, [task_spec("worker", 0, code)])
    cleanup[1].append(layout.root)
    sup = start_supervisor(layout)
    cleanup[0].append(sup)
    log = Path(layout.log_file("worker", 0))
    wait_for(lambda: log.exists() and "ready" in log.read_text(), 10, "the task to say ready")
    child, _, thread = (int(x) for x in log.read_text().split("ready", 1)[1].split()[:3])
    task = read_task_state(layout, "worker", 0)["pid"]
    mine = os.getpriority(os.PRIO_PROCESS, sup.pid)
    assert mine == os.getpriority(os.PRIO_PROCESS, 0)  # the supervisor keeps ours
    for pid in (task, child, thread):  # (a thread's niceness is its own: setpriority takes its id)
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(mine + DEFAULTS["nice"], 19), pid
