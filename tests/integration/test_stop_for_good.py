"""Stop for good over real sshd: `CollectorActions.stop_task` (the dashboard's `x`) on a running task of a
real run on 3 loopback machines.

First with a trivial stdlib task program (the user-command path, as in test_lifecycle.py): the task
stays exited (held), is not restarted (not even once a task killed after it was restarted on its host),
the other tasks keep running,
`status --json` shows it exited and not failed, and once the others finish the run is `finished`.
Then with real TensorFlow (between-graph, built-in programs): a worker stopped for good lets the other
finish and the run end `finished` by itself. Then the rule of issue 21 point 7 (training/supervisor/
policy.py): under `all-workers` a held worker still lets the run finish; a held ps (a task the run
cannot go on without) ends it `stopped` at once.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.monitor.collect import Collector, CollectorActions
from orchestrator.monitor.state_json import state_json
from orchestrator.run import records as runs
from testkit.sshd import Machines
from tests import requires
from tests.helpers.collecting import state_when
from tests.helpers.procs import gone
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import (
    cli,
    run_processes,
    started_run_id,
    status_json,
)
from training.run.layout import RunLayout

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

INTERVAL = 0.5
# The others keep running: alive, by their supervisors' word. This program reports no progress, so its
# liveness is its CPU time, which moves in clock ticks: on a loaded machine a window of INTERVALs can pass
# without one, and it is then rightly `stalled` (orchestrator/monitor/views.py), alive all the same.
ALIVE = ("running", "starting", "stalled")
# Ticks until the release file exists (the loopback machines share this filesystem), then exits 0.
TASK_PY = """\
import os, sys, time
release = sys.argv[3]
while not os.path.exists(release):
    print(f"tick {sys.argv[1]}:{sys.argv[2]}", flush=True)
    sum(range(300_000))  # a little work, as training does: its CPU time moves (it is `running`)
    time.sleep(0.2)  # polls for the file that ends it
"""






def _task(st: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in st["tasks"] if t["name"] == name)


def _attempts(run_id: str, task: str) -> set[str]:
    """TFCLUSTER_TASK_ID of every live process of `task` (independent of the code under test)."""
    ids = set()
    for p in run_processes(run_id):
        try:
            tid = p.environ().get("TFCLUSTER_TASK_ID", "")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if tid.startswith(f"{task}#"):
            ids.add(tid)
    return ids


def test_stop_task_stops_a_task_for_good_and_the_run_still_finishes(machines: Machines, tmp_path: Path,
                                                                   state_dir: Path) -> None:
    (tmp_path / "task.py").write_text(TASK_PY)
    release = tmp_path / "release"
    # ps:1 shares m2 (and its supervisor) with worker:1: its restart after a kill dates a restart of worker:1
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps"], ["chief", "worker"], ["worker", "ps"]], training={
        "command": "{python} task.py {job} {task} " + str(release), "sync": ["task.py"],
        "restart": "on-failure", "max_restarts": 3})
    res = cli(state_dir, "start", str(hosts))
    assert res.returncode == 0, res.stdout + res.stderr
    run_id = started_run_id(res.stdout)
    wait_for(lambda: all(t["state"] == "running" for t in status_json(state_dir, run_id)[1]["tasks"]), 30,
             "every task running")

    record = runs.load(run_id)
    collector = Collector.for_record(record, INTERVAL).start()
    try:
        st = collector.wait_for_data(2, timeout=60)
        tv = st.tasks["worker:1"]
        # This program reports no progress, so the dashboard calls it `starting`: alive, with a pid.
        assert tv.state in ("running", "starting") and tv.pid is not None, state_json(st)
        pid, host = tv.pid, tv.host
        assert _attempts(run_id, "worker-1") == {"worker-1#0"}

        answer = CollectorActions(collector).stop_task("worker", 1)
        assert answer.startswith(f"worker:1 on {host}: stopped for good (held; SIGTERM to pid ") and str(pid) in answer
        hold = Path(RunLayout(record.host(host).run_dir or "").hold_file("worker", 1))
        assert json.loads(hold.read_text())["reason"] == "stopped by the user"

        def held() -> bool:
            t = collector.poll().tasks["worker:1"]
            return t.state == "exited" and t.held
        wait_for(held, 10 * INTERVAL + 5, "the collector to show worker:1 exited, held")
        assert any("worker:1 on " in e.text and "stopped for good by the user" in e.text for e in collector.state.log)

        # ps:1, killed after worker:1 exited, is restarted by m2's supervisor after the same first backoff:
        # once it runs again, a restart of worker:1 would have started too.
        os.kill(_task(status_json(state_dir, run_id)[1], "ps:1")["pid"], signal.SIGKILL)
        # Its new process running by its supervisor's word (`starting` until then), as the others' are.
        state_when(collector, lambda s: s.tasks["ps:1"].process_state == "running" and s.tasks["ps:1"].restarts == 1,
                   60, "ps:1 restarted by m2's supervisor and running")
        assert gone(pid)
        assert _attempts(run_id, "worker-1") == set()  # no new attempt of it anywhere
        st = collector.poll()
        assert st.tasks["worker:1"].state == "exited" and st.tasks["worker:1"].restarts == 0
        others = [t for name, t in st.tasks.items() if name != "worker:1"]
        assert others and all(t.state in ALIVE and t.process_state == "running" for t in others), \
            {t.name: (t.state, t.process_state, t.restarts, t.cpu_s, t.age_s) for t in others}
    finally:
        collector.close()

    code, st = status_json(state_dir, run_id)
    w1 = _task(st, "worker:1")
    assert (w1["state"], w1["held"], w1["failed"], w1["final"], w1["restarts"]) == ("exited", True, False, True, 0)
    assert w1["signal"] == 15
    others_now = [t for t in st["tasks"] if t["name"] != "worker:1"]
    assert all(t["state"] in ALIVE and t["process_state"] == "running" for t in others_now), st
    assert code == 0 and st["state"] == "running" and not st["failed"]
    text = cli(state_dir, "status", run_id)
    assert "stopped for good" in text.stdout and "FAILED" not in text.stdout

    release.touch()  # the others finish: the run ends `finished`, the held task included
    code, st = wait_for(lambda: (r := status_json(state_dir, run_id))[1]["state"] == "finished" and r, 30, "finished")
    assert code == 0
    # Every other task exited 0, or (the PS, whose program also polls the release file) was ended by the
    # run when the last worker finished first.
    assert all(t["exit_code"] == 0 or t["stopped_by"] == "run" for t in st["tasks"] if t["name"] != "worker:1"), st
    assert not any(t["failed"] for t in st["tasks"]), st
    assert _task(st, "worker:1")["held"] and not _task(st, "worker:1")["failed"]
    wait_for(lambda: not run_processes(run_id), 15, "every supervisor to exit")


def test_a_builtin_worker_stopped_for_good_lets_between_graph_training_finish(
    machines: Machines, tmp_path: Path, state_dir: Path
) -> None:
    """Real TensorFlow: what a user expects after stopping one between-graph worker for good is that the
    other finishes training and the run ends `finished` by itself (the held worker's supervisor stands
    in for it on the ps done queue), not `failed` and not waiting for `stop`."""
    requires.tensorflow()
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps"], ["worker"], ["worker"]], training={
        "model": "mlp", "batch_size": 16, "progress_interval": 0.5, "checkpoint_every_secs": 600.0,
        "steps": 150, "restart": "on-failure"})
    res = cli(state_dir, "start", str(hosts), "--timeout", "120")
    assert res.returncode == 0, res.stdout + res.stderr
    run_id = started_run_id(res.stdout)
    collector = Collector.for_record(runs.load(run_id), INTERVAL).start()
    try:
        st = collector.wait_for_data(2, timeout=60)
        assert st.tasks["worker:1"].pid is not None, state_json(st)
        answer = CollectorActions(collector).stop_task("worker", 1)
        assert "stopped for good" in answer, answer
    finally:
        collector.close()

    def ended() -> dict[str, Any] | None:
        _, s = status_json(state_dir, run_id)
        return s if s["state"] in ("finished", "failed") and all(t["final"] for t in s["tasks"]) else None

    st = wait_for(ended, 180, f"run {run_id} to end by itself", interval=1.0)
    logs = cli(state_dir, "logs", run_id, "-n", "15").stdout
    assert st["state"] == "finished", logs
    w1 = _task(st, "worker:1")
    assert w1["held"] and not w1["failed"] and w1["restarts"] == 0, st
    assert _task(st, "worker:0")["exit_code"] == 0 and _task(st, "ps:0")["exit_code"] == 0, logs
    assert "worker:1 was stopped for good by the user" in cli(state_dir, "logs", run_id, "worker:1").stdout
    wait_for(lambda: not run_processes(run_id), 30, "every process of the run to exit")


def _hold(run_id: str, job: str, index: int) -> None:
    """The dashboard's `x` on a task, as the dashboard does it (CollectorActions.stop_task)."""
    collector = Collector.for_record(runs.load(run_id), INTERVAL).start()
    try:
        collector.wait_for_data(2, timeout=60)
        assert "stopped for good" in CollectorActions(collector).stop_task(job, index)
    finally:
        collector.close()


def _stdlib_run(machines: Machines, tmp_path: Path, state_dir: Path, **training: object) -> tuple[str, Path]:
    (tmp_path / "task.py").write_text(TASK_PY)
    release = tmp_path / "release"
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps"], ["worker"], ["worker"]], training={
        "command": "{python} task.py {job} {task} " + str(release), "sync": ["task.py"], **training})
    res = cli(state_dir, "start", str(hosts))
    assert res.returncode == 0, res.stdout + res.stderr
    run_id = started_run_id(res.stdout)
    wait_for(lambda: all(t["state"] == "running" for t in status_json(state_dir, run_id)[1]["tasks"]), 30,
             "every task running")
    return run_id, release


def test_under_all_workers_a_worker_stopped_for_good_still_lets_the_run_finish(
        machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    """README: the run goes on without it and can still end `finished`: the other worker finishes it."""
    run_id, release = _stdlib_run(machines, tmp_path, state_dir, success="all-workers")
    _hold(run_id, "worker", 1)
    wait_for(lambda: _task(status_json(state_dir, run_id)[1], "worker:1")["held"], 30,
             f"worker:1 held: {status_json(state_dir, run_id)}")
    assert status_json(state_dir, run_id)[1]["state"] == "running"  # goes on without it
    release.touch()
    code, st = wait_for(lambda: (r := status_json(state_dir, run_id))[1]["state"] in ("finished", "stopped") and r,
                        30, "the run to end")
    assert (code, st["state"]) == (0, "finished"), st
    assert _task(st, "worker:0")["exit_code"] == 0 and not st["failed"]
    wait_for(lambda: not run_processes(run_id), 15, "every supervisor to exit")


def test_a_task_the_run_cannot_go_on_without_stopped_for_good_ends_it_stopped(
        machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    """The ps (every worker's variables live there): held, the run ends `stopped` at once, everywhere,
    its other tasks ended by the run, none failed; nothing is left running."""
    run_id, _ = _stdlib_run(machines, tmp_path, state_dir)
    _hold(run_id, "ps", 0)
    code, st = wait_for(lambda: (r := status_json(state_dir, run_id))[1]["state"] in ("finished", "stopped") and r,
                        30, "the run to end")
    assert (code, st["state"]) == (0, "stopped") and not st["failed"], st
    assert _task(st, "ps:0")["held"]
    assert all(_task(st, name)["stopped_by"] == "run" for name in ("worker:0", "worker:1")), st
    wait_for(lambda: not run_processes(run_id), 15, "every supervisor to exit")
