"""`start --wait`'s follower (orchestrator/monitor/follow.py) judged on status results built by hand and a
clock the test sets: when it ends, with which outcome and which last line (issue 21 point 1). The
follower over real sshd and real TensorFlow: tests/integration/test_start_wait.py."""

from __future__ import annotations

from typing import Any

from orchestrator.monitor.follow import RunFollower, Seen
from orchestrator.monitor.task_state import RunState, TaskState
from orchestrator.run import records as runs
from tests.plans import tiny_plan

WINDOW = 10.0
# ps:0 on m0, worker:0 (the chief) on m1, worker:1 on m2
ROLES = (("ps",), ("worker",), ("worker",))


def _follower(mode: str = "between-graph", success: str = "chief") -> RunFollower:
    roles = ROLES if mode != "multi-worker-mirrored" else (("worker",), ("worker",), ("worker",))  # no ps there
    plan = tiny_plan(roles, mode=mode, training={"success": success})
    record = runs.RunRecord(run_id="r", config_path="h", cluster="demo", mode=mode, created=0.0, plan=plan,
                            hosts=[runs.HostRecord(name=h.name, workdir="/w") for h in plan.hosts])
    return RunFollower.of(record, WINDOW)


UNSET = {"gpus": (), "process_state": None, "pid": None, "exit_code": None, "signal": None, "final": False,
         "failed": False, "stopped_by": None, "restarts": 0, "restarts_left": None, "restart_reason": None,
         "error": None, "updated_at": None, "reports": "yes", "coordinator": False, "local_step": None,
         "global_step": None, "examples": None, "loss": None, "steps_per_s": None, "examples_per_s": None,
         "progress_at": None, "age_s": None, "cpu_s": None, "no_progress_reported": False}


def TaskStatus(job: str, index: int, host: str, state: str, **fields: Any) -> TaskState:
    return TaskState(name=f"{job}:{index}", job=job, index=index, host=host, state=state,  # type: ignore[arg-type]
                     **{**UNSET, **fields})


def _status(state: RunState = "running", step: int = 0, **tasks: TaskState) -> Seen:
    base = {"ps_0": TaskStatus("ps", 0, "m0", "running"), "worker_0": TaskStatus("worker", 0, "m1", "running"),
            "worker_1": TaskStatus("worker", 1, "m2", "running")}
    return Seen(state, list({**base, **tasks}.values()), step)


def _gone(job: str, index: int, host: str, state: str = "unreachable") -> TaskState:
    return TaskStatus(job, index, host, state)


def test_a_lost_worker_does_not_keep_it_waiting_once_the_chief_finished() -> None:
    f = _follower()
    lost_worker = _gone("worker", 1, "m2")
    assert f.judge(_status("partial", 10, worker_1=lost_worker), "started", 0.0) is None
    assert f.judge(_status("partial", 20, worker_1=lost_worker), "started", WINDOW + 1) is None  # chief trains on
    chief_done = TaskStatus("worker", 0, "m1", "exited", final=True, exit_code=0)
    ps_ended = TaskStatus("ps", 0, "m0", "exited", final=True, exit_code=0, stopped_by="run")
    ending = f.judge(_status("partial", 30, worker_0=chief_done, worker_1=lost_worker, ps_0=ps_ended), "started", 12)
    assert ending is not None and ending.outcome == "finished", ending
    assert "worker:1 (host m2) lost on the way" in ending.why


def test_the_chief_done_but_a_server_never_ends_still_ends_within_two_windows() -> None:
    f = _follower()
    chief_done = TaskStatus("worker", 0, "m1", "exited", final=True, exit_code=0)
    st = _status("running", 30, worker_0=chief_done)
    assert f.judge(st, "started", 0.0) is None
    assert f.judge(st, "started", 2 * WINDOW - 1) is None
    ending = f.judge(st, "started", 2 * WINDOW)
    assert ending is not None and ending.outcome == "finished" and "still not ended" in ending.why, ending


def test_a_lost_ps_host_is_exit_3_after_one_liveness_window() -> None:
    f = _follower()
    st = _status("partial", 10, ps_0=_gone("ps", 0, "m0"))
    assert f.judge(st, "started", 0.0) is None
    assert f.judge(st, "started", WINDOW - 0.5) is None  # a host may come back within the window
    ending = f.judge(st, "started", WINDOW)
    assert ending is not None and ending.outcome == "lost" and "ps:0 (host m0)" in ending.why, ending


def test_a_host_back_within_the_window_is_not_lost() -> None:
    f = _follower()
    assert f.judge(_status("partial", 10, ps_0=_gone("ps", 0, "m0")), "started", 0.0) is None
    assert f.judge(_status("running", 11), "started", WINDOW - 1) is None
    assert f.judge(_status("partial", 12, ps_0=_gone("ps", 0, "m0")), "started", WINDOW + 1) is None


def test_a_lost_task_whose_supervisor_is_gone_is_lost_at_once_when_needed() -> None:
    f = _follower()
    ending = f.judge(_status("partial", 10, worker_0=_gone("worker", 0, "m1", "lost")), "started", 0.0)
    assert ending is not None and ending.outcome == "lost" and "worker:0 (host m1)" in ending.why


def test_every_worker_is_needed_in_the_synchronous_modes_and_under_all_workers() -> None:
    for follower in (_follower("in-graph"), _follower("multi-worker-mirrored"), _follower(success="all-workers")):
        ending = follower.judge(_status("partial", 10, worker_1=_gone("worker", 1, "m2", "lost")), "started", 0.0)
        assert ending is not None and ending.outcome == "lost", (follower.needed, ending)
    ps_strategy = _follower("parameter-server-strategy")  # a dead worker's steps go to the others
    assert ps_strategy.judge(_status("partial", 10, worker_1=_gone("worker", 1, "m2", "lost")), "started", 0.0) is None


def test_stuck_with_a_lost_worker_ends_partial_two_windows_after_the_last_move() -> None:
    f = _follower()
    lost, stalled = _gone("worker", 1, "m2", "lost"), TaskStatus("worker", 0, "m1", "stalled")
    assert f.judge(_status("partial", 10, worker_1=lost), "started", 0.0) is None
    assert f.judge(_status("partial", 10, worker_1=lost, worker_0=stalled), "started", 1.0) is None
    assert f.judge(_status("partial", 10, worker_1=lost, worker_0=stalled), "started", 1 + 2 * WINDOW - 0.5) is None
    ending = f.judge(_status("partial", 10, worker_1=lost, worker_0=stalled), "started", 1 + 2 * WINDOW)
    assert ending is not None and ending.outcome == "lost" and "nothing the run waits for has moved" in ending.why


def test_a_chief_training_on_without_reporting_progress_is_not_stuck() -> None:
    f = _follower()
    lost = _gone("worker", 1, "m2", "lost")
    for now in (0.0, WINDOW, 3 * WINDOW, 10 * WINDOW):
        assert f.judge(_status("partial", 10, worker_1=lost), "started", now) is None  # the chief is `running`


def test_a_stop_from_another_terminal_ends_it_even_with_a_host_unreachable() -> None:
    ending = _follower().judge(_status("partial", 10, worker_1=_gone("worker", 1, "m2")), "stopped", 0.0)
    assert ending is not None and ending.outcome == "stopped" and "tfcluster stop" in ending.why


def test_tasks_ended_by_stop_before_it_saved_the_record_say_stop_not_stopped_for_good() -> None:
    """`stop` ends the tasks, then saves the record: a look in between sees them ended by `stop`."""
    ended = {name: TaskStatus(job, i, host, "exited", final=True, stopped_by="stop")
             for name, job, i, host in (("ps_0", "ps", 0, "m0"), ("worker_0", "worker", 0, "m1"),
                                        ("worker_1", "worker", 1, "m2"))}
    ending = _follower().judge(_status("stopped", 10, **ended), "started", 0.0)
    assert ending is not None and ending.outcome == "stopped" and ending.why == "stopped by `tfcluster stop`"
    held = {**ended, "worker_0": TaskStatus("worker", 0, "m1", "exited", final=True, stopped_by="user")}
    held["ps_0"] = TaskStatus("ps", 0, "m0", "exited", final=True, stopped_by="run")
    held["worker_1"] = TaskStatus("worker", 1, "m2", "exited", final=True, stopped_by="run")
    ending = _follower().judge(_status("stopped", 10, **held), "started", 0.0)
    assert ending is not None and "stopped for good" in ending.why


def test_failed_names_the_first_failed_task_and_its_error() -> None:
    early = TaskStatus("worker", 1, "m2", "exited", final=True, exit_code=1, failed=True, updated_at=5.0,
                       error="ModuleNotFoundError: No module named 'tensorflow'")
    later = TaskStatus("worker", 0, "m1", "exited", final=True, exit_code=1, failed=True, updated_at=6.0,
                       error="OSError: later")
    ending = _follower().judge(_status("failed", worker_0=later, worker_1=early), "started", 0.0)
    assert ending is not None and ending.outcome == "failed"
    assert ending.why == "failed: worker:1: ModuleNotFoundError: No module named 'tensorflow'"
