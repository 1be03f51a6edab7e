"""The one read of a host (orchestrator/run/read_host.py) under this machine's real /bin/sh, against a
directory laid out like a run dir (training/run/layout.py) with real processes carrying the run's marker:
a live supervisor, a dead one whose tasks still run or are gone, damaged files, no run dir, values that
need quoting. Then what `status` makes of a read: the fold into the reducer (orchestrator/monitor/
status.py) and the run's state from its tasks and hosts. No network, no TensorFlow."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.config.schema import Config
from orchestrator.errors import HostError
from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.status import fold
from orchestrator.plan.from_file import plan_config
from orchestrator.run.read_host import HostReading, decode, read_script
from orchestrator.transport.base import CommandResult
from tests.helpers.state_events import feed, hb, progress, task_state
from training.run.layout import RUN_DIR_ENV, RunLayout
from training.telemetry.state_files import SupervisorStateFile
from training.telemetry.task_record import TaskRecord

HOST = "m0"
NOW = time.time()


def _layout(root: Path) -> RunLayout:
    layout = RunLayout(str(root))
    for d in layout.dirs():
        os.makedirs(d, exist_ok=True)
    return layout


def _process(layout: RunLayout, spawned: list[subprocess.Popen[bytes]], task_id: str = "") -> int:
    """A real process of the run: it carries the marker (and a task's TFCLUSTER_TASK_ID)."""
    env = {**os.environ, RUN_DIR_ENV: layout.root, **({"TFCLUSTER_TASK_ID": task_id} if task_id else {})}
    proc = subprocess.Popen(["sleep", "300"], env=env)
    spawned.append(proc)
    return proc.pid


def _write(path: str, data: object) -> None:
    Path(path).write_text(json.dumps(data, separators=(",", ":")) + "\n")


def _supervisor(layout: RunLayout, pid: int, state: str = "running", outcome: str | None = None) -> None:
    _write(layout.supervisor_state_file(HOST), {"kind": "supervisor", "host": HOST, "pid": pid, "pgid": pid,
                                                "state": state, "outcome": outcome, "updated_at": NOW})


def _task(layout: RunLayout, job: str, index: int, state: str, **fields: object) -> None:
    _write(layout.task_state_file(job, index), {"kind": "task", "host": HOST, "job": job, "task": index,
                                                "state": state, "updated_at": NOW, **fields})


def _progress(layout: RunLayout, job: str, index: int, steps: list[int], t0: float = NOW - 2) -> None:
    with open(layout.events_file(job, index), "w") as f:
        for i, step in enumerate(steps):
            f.write(json.dumps({"v": 1, "kind": "progress", "t": t0 + i, "host": HOST, "job": job, "task": index,
                                "local_step": step, "global_step": step, "examples": step * 32, "loss": 1.0,
                                "interval_s": 1.0}) + "\n")


def _read(layout: RunLayout, host: str = HOST) -> HostReading:
    done = subprocess.run(["/bin/sh", "-c", read_script(layout.root, host)], capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.stderr == "", done.stderr
    return decode(host, CommandResult(host, "read", done.returncode, done.stdout, done.stderr, 0.0))


def test_a_live_supervisor_its_files_and_the_newest_progress(tmp_path: Path,
                                                             spawned: list[subprocess.Popen[bytes]]) -> None:
    layout = _layout(tmp_path / "runs" / "r1")
    _supervisor(layout, _process(layout, spawned))
    _task(layout, "worker", 0, "running", pid=11, restarts=1)
    _task(layout, "ps", 0, "running", pid=12)
    Path(layout.facts_file(HOST)).write_text(json.dumps({"host": HOST, "t": NOW, "tasks": {
        "worker-0": {"procs": 1, "cpu_s": 3.5}, "ps-0": {"procs": 1, "cpu_s": 1.0}}}))  # (no newline: as written)
    _progress(layout, "worker", 0, [10, 20, 30, 40, 50])
    _write(layout.supervisor_events_file(HOST), {"kind": "task_state"})  # not a task's progress: not read
    seen = _read(layout)
    assert seen.supervisor is not None and seen.supervisor.state == "running" and seen.supervisor_alive is True
    assert sorted((t.job, t.task, t.pid) for t in seen.tasks) == [("ps", 0, 12), ("worker", 0, 11)]
    assert seen.facts["tasks"]["worker-0"]["cpu_s"] == 3.5
    assert [line["local_step"] for line in seen.progress["worker-0"]] == [30, 40, 50]  # the newest three
    assert set(seen.progress) == {"worker-0"} and seen.processes is None  # (counted only without a supervisor)
    assert seen.now is not None and abs(seen.now - time.time()) < 60 and seen.damaged == ()


def test_a_dead_supervisor_its_tasks_are_counted_from_proc(tmp_path: Path,
                                                           spawned: list[subprocess.Popen[bytes]]) -> None:
    layout = _layout(tmp_path / "runs" / "r1")
    gone = subprocess.Popen(["true"])
    gone.wait()
    _supervisor(layout, gone.pid)
    _task(layout, "worker", 0, "running", pid=11)
    _task(layout, "worker", 1, "running", pid=12)
    alive = _process(layout, spawned, task_id="worker-0#0")
    _process(_layout(tmp_path / "runs" / "r10"), spawned, "worker-0#0")  # another run: a longer marker
    seen = _read(layout)
    assert seen.supervisor_alive is False
    assert seen.processes is not None and [(p.pid, p.task) for p in seen.processes] == [(alive, "worker-0#0")]
    assert "sleep 300" in seen.processes[0].args
    st = _judged(seen)
    assert st.tasks["worker:0"].state == "starting"  # its process lives (it reports no progress yet)
    assert st.tasks["worker:1"].state == "lost"  # its supervisor and its processes are gone
    assert st.hosts[HOST].supervisor_alive is False and st.hosts[HOST].processes == 1
    assert st.run_state == "partial"


def test_damaged_files_are_named_and_never_hide_the_others(tmp_path: Path,
                                                           spawned: list[subprocess.Popen[bytes]]) -> None:
    layout = _layout(tmp_path / "runs" / "r1")
    _supervisor(layout, _process(layout, spawned))
    _task(layout, "worker", 0, "running", pid=11)
    Path(layout.task_state_file("worker", 1)).write_text("{not json")
    _task(layout, "worker", 2, "sleeping")  # not a state the supervisor writes
    Path(layout.facts_file(HOST)).write_text("[]")
    _progress(layout, "worker", 0, [1, 2])
    with open(layout.events_file("worker", 0), "a") as f:
        f.write('{"v": 1, "kind": "progr')  # a line being written
    Path(layout.state, "==> state").write_text("x")  # a file name like tail's header is no header
    seen = _read(layout)
    assert sorted(seen.damaged) == ["state/host-m0.facts", "state/worker-1.json", "state/worker-2.json"]
    assert [(t.job, t.task) for t in seen.tasks] == [("worker", 0)] and seen.supervisor is not None
    assert [line["local_step"] for line in seen.progress["worker-0"]] == [1, 2]
    assert "unreadable" in (_judged(seen).hosts[HOST].error or "")


def test_no_run_dir_and_values_that_need_quoting(tmp_path: Path, spawned: list[subprocess.Popen[bytes]]) -> None:
    assert _read(RunLayout(str(tmp_path / "runs" / "never"))).absent
    odd = _layout(tmp_path / "it's a $(run) dir")
    host = "m0; touch pwned"
    _write(odd.supervisor_state_file(host), {"kind": "supervisor", "host": host, "pid": _process(odd, spawned),
                                             "state": "running"})
    seen = _read(odd, host)
    assert seen.supervisor_alive is True and seen.supervisor is not None and seen.supervisor.host == host
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


def _judged(seen: HostReading | HostError | None, *, record_status: str = "started") -> ClusterState:
    """What `status` makes of one read of m0, the one host of a run of two workers, judged now."""
    plan = plan_config(Config.model_validate({"cluster": {"mode": "multi-worker-mirrored"}, "hosts": [
        {"name": HOST, "address": "127.0.0.2", "roles": ["worker"], "workers": 2, "transport": "local"}]}))
    st = ClusterState.from_plan(plan, "r1", now=NOW)
    st.record_status = record_status
    fold(st, HOST, seen, time.time())
    st.tick(time.time())
    return st


def _reading(*tasks: tuple[str, int, str, dict[str, object]], outcome: str | None = None,
             progress: dict[int, list[int]] | None = None) -> HostReading:
    """A read of m0 with a live supervisor, built from what its files would say: task states, each
    task's facts, and worker i's newest progress lines (`progress`: i -> local steps a second apart)."""
    states = tuple(TaskRecord.from_json({"host": HOST, "job": job, "task": i, "state": state, "updated_at": NOW - 60,
                                         **fields}) for job, i, state, fields in tasks)  # (a state is written once)
    lines = {f"worker-{i}": tuple({"v": 1, "kind": "progress", "t": NOW - len(steps) + k, "host": HOST,
                                   "job": "worker", "task": i, "local_step": step, "global_step": step,
                                   "examples": step, "loss": 1.0, "interval_s": 1.0} for k, step in enumerate(steps))
             for i, steps in (progress or {}).items()}
    facts = {"tasks": {f"{job}-{i}": {"procs": 0 if state == "exited" else 1, "cpu_s": 1.0}
                       for job, i, state, _ in tasks}}
    return HostReading(now=NOW, supervisor=SupervisorStateFile(HOST, 1, "running", outcome=outcome),
                       supervisor_alive=True, tasks=states, facts=facts, progress=lines)


def test_rates_come_from_the_newest_progress_lines_and_a_restarting_task_has_none() -> None:
    restarted = {"restarts": 1, "signal": 9, "updated_at": NOW}  # after its last progress: the dead process's
    seen = _reading(("worker", 0, "running", {"pid": 5}), ("worker", 1, "restarting", restarted),
                    progress={0: [100, 110, 120], 1: [40, 80, 120]})
    st = _judged(seen)
    assert st.tasks["worker:0"].state == "running" and st.tasks["worker:0"].steps_per_s == pytest.approx(10.0)
    restarting = st.tasks["worker:1"]
    assert restarting.state == "restarting" and restarting.steps_per_s is None and restarting.examples_per_s is None
    assert (restarting.exit_code, restarting.failed) == (-9, False)


def test_the_run_state_rules() -> None:
    held = ("worker", 1, "exited", {"signal": 15, "final": True, "stopped_by": "user"})
    done = ("worker", 0, "exited", {"exit_code": 0, "final": True})
    failed = ("worker", 1, "exited", {"exit_code": 3, "final": True})
    assert _judged(_reading(("worker", 0, "running", {}), ("worker", 1, "running", {}))).run_state == "running"
    st = _judged(_reading(done, held))
    assert st.run_state == "finished" and st.tasks["worker:1"].held and not st.tasks["worker:1"].failed
    st = _judged(_reading(done, failed))
    assert st.run_state == "failed" and st.tasks["worker:1"].failed
    assert _judged(_reading(held, ("worker", 0, "exited", {"signal": 15, "final": True, "stopped_by": "user"}))
                   ).run_state == "stopped"  # every task stopped for good, one by one
    assert _judged(_reading(("worker", 0, "running", {}), ("worker", 1, "running", {}), outcome="failed")
                   ).run_state == "failed"  # the supervisors' outcome first
    unreachable = _judged(HostError(HOST, "refused", "connection refused"))
    assert unreachable.run_state == "partial" and unreachable.tasks["worker:0"].state == "unreachable"
    absent = _judged(HostReading(absent=True), record_status="stopped")
    assert absent.run_state == "stopped" and absent.tasks["worker:0"].state == "not-started"


def test_an_older_supervisor_word_folded_in_after_newer_progress_keeps_the_new_process_rates() -> None:
    """A task's progress may come from another host (parameter-server-strategy's coordinator writes its
    workers' events on its own host) and be folded in before the task's own host says `running`."""
    st = ClusterState(now=NOW)
    st.add_task("worker", 0, "a")
    feed(st, hb("b", NOW + 12))
    for i in range(3):
        feed(st, progress(NOW + 10 + i, 5 * i, host="b"), now=NOW + 12)
    feed(st, hb("a", NOW + 12))
    feed(st, task_state(NOW + 5, "running", pid=7), now=NOW + 12)  # written when the process started
    st.tick(NOW + 12)
    tv = st.tasks["worker:0"]
    assert (tv.state, tv.host, tv.pid) == ("running", "a", 7) and tv.steps_per_s == pytest.approx(5.0)
