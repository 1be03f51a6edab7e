"""training/supervisor/resize.py with a real supervisor process on a run dir built here: a new run.json with a
higher resize serial makes it drop the tasks no longer planned here (processes gone, state files retired so
no reader shows them), start the new ones, restart the ones named, and leave the others running."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import psutil

from tests.helpers.supervisor_runs import make_run, read_task_state, start_supervisor, task_spec
from tests.helpers.waiting import wait_for
from training.run.layout import RunLayout

FOREVER = "import time\nwhile True: time.sleep(0.2)"


def supervisor_state(layout: RunLayout) -> dict[str, Any]:
    try:
        return dict(json.loads(Path(layout.supervisor_state_file("h1")).read_text()))
    except (OSError, ValueError):
        return {}


def running_pid(layout: RunLayout, job: str, index: int) -> int | None:
    state = read_task_state(layout, job, index)
    return state.get("pid") if state.get("state") == "running" else None


def both_running(layout: RunLayout) -> tuple[int, int] | None:
    first, second = running_pid(layout, "worker", 0), running_pid(layout, "worker", 1)
    return (first, second) if first and second else None


def resize_to(layout: RunLayout, tasks: list[dict[str, Any]], serial: int, restart: list[str]) -> None:
    run = json.loads(Path(layout.run_file).read_text())
    run["plan"]["tasks"] = tasks
    run["resize"] = {"serial": serial, "restart": restart}
    tmp = Path(layout.run_file + ".tmp")
    tmp.write_text(json.dumps(run))
    os.replace(tmp, layout.run_file)  # as orchestrator/run/resize_host.py's push: whole, never half


def test_a_running_supervisor_takes_on_drops_and_restarts_tasks(tmp_path: Path) -> None:
    w0, w1, w2 = (task_spec("worker", i, FOREVER) for i in range(3))
    layout = make_run(tmp_path, [w0, w1], grace=1.0)
    sup = start_supervisor(layout)
    try:
        pids = wait_for(lambda: both_running(layout), 20, "both tasks running")
        assert pids is not None
        resize_to(layout, [w0, w2], 1, [])
        wait_for(lambda: supervisor_state(layout).get("resize_serial") == 1, 20, "the resize applied")
        assert not psutil.pid_exists(pids[1]) or psutil.Process(pids[1]).status() == psutil.STATUS_ZOMBIE
        assert not Path(layout.task_state_file("worker", 1)).exists()  # no row for it anywhere
        assert Path(layout.task_state_file("worker", 1) + ".resized").exists()
        assert wait_for(lambda: running_pid(layout, "worker", 2), 20, "worker-2 started")
        assert running_pid(layout, "worker", 0) == pids[0]  # left alone
        assert supervisor_state(layout)["tasks"] == ["worker-0", "worker-2"]
        assert supervisor_state(layout)["state"] == "running"  # a removed task is no failure of the run

        resize_to(layout, [w0, w2], 2, ["worker-0"])
        wait_for(lambda: supervisor_state(layout).get("resize_serial") == 2, 20, "the second resize applied")
        new_pid = wait_for(lambda: running_pid(layout, "worker", 0), 20, "worker-0 running again")
        assert new_pid != pids[0] and not psutil.pid_exists(pids[0])
        assert "removed from the run by `tfcluster resize`" in Path(layout.log_file("worker", 1)).read_text()
    finally:
        sup.terminate()
        sup.wait(timeout=20)


def test_a_resize_gives_a_mirrored_group_the_serial_as_its_epoch(tmp_path: Path) -> None:
    """multi-worker-mirrored: the group-restart epoch becomes the resize's serial on every host (a peer's
    group restart caused by the resize is older, ignored), and a kept task stays a member of the group: its
    failure after the resize restarts the group, not itself alone."""
    w0, w1 = (task_spec("worker", i, FOREVER) for i in range(2))
    layout = make_run(tmp_path, [w0, w1], grace=1.0)
    run = json.loads(Path(layout.run_file).read_text())
    Path(layout.run_file).write_text(json.dumps({**run, "plan": {**run["plan"], "mode": "multi-worker-mirrored"},
                                                 "resize": {"serial": 7, "restart": []}}))
    sup = start_supervisor(layout)
    try:
        pids = wait_for(lambda: both_running(layout), 20, "both tasks running")
        assert pids is not None
        assert supervisor_state(layout)["epoch"] == 7  # a host a resize launched starts at its serial
        resize_to(layout, [w0, w1], 5000, [])
        wait_for(lambda: supervisor_state(layout).get("resize_serial") == 5000, 20, "the resize applied")
        assert supervisor_state(layout)["epoch"] == 5000
        assert both_running(layout) == pids  # nothing restarted: none was named
        psutil.Process(pids[0]).kill()
        wait_for(lambda: supervisor_state(layout).get("epoch") == 5001, 20, "a group restart")
        again = wait_for(lambda: (b := both_running(layout)) and b[0] != pids[0] and b[1] != pids[1] and b, 20,
                         "both tasks restarted together")
        assert again and not psutil.pid_exists(pids[1])
    finally:
        sup.terminate()
        sup.wait(timeout=20)


def test_a_group_restarted_with_the_new_plan_is_not_restarted_again_by_the_resize(tmp_path: Path) -> None:
    """A mirrored resize's two serials (orchestrator/run/resize.py `_kept_then_new`): the first gives the new
    plan, nothing restarts; a member then loses its group (a peer restarted first) and the group restarts here
    with the new plan; the second serial names the members for a restart, and they are left be: one restart
    each, not two. A resize with another plan (the old one given back) restarts them."""
    w0, w1 = (task_spec("worker", i, FOREVER) for i in range(2))
    layout = make_run(tmp_path, [w0, w1], grace=1.0)
    run = json.loads(Path(layout.run_file).read_text())
    Path(layout.run_file).write_text(json.dumps({**run, "plan": {**run["plan"], "mode": "multi-worker-mirrored"},
                                                 "resize": {"serial": 7, "restart": []}}))
    new = [task_spec("worker", i, FOREVER + "  # the new cluster") for i in range(2)]
    sup = start_supervisor(layout)
    try:
        pids = wait_for(lambda: both_running(layout), 20, "both tasks running")
        assert pids is not None
        resize_to(layout, new, 100, [])
        wait_for(lambda: supervisor_state(layout).get("resize_serial") == 100, 20, "the first serial applied")
        assert both_running(layout) == pids
        psutil.Process(pids[0]).kill()  # lost its group
        regrouped = wait_for(lambda: (b := both_running(layout)) and b[0] != pids[0] and b[1] != pids[1] and b, 20,
                             "the group restarted")
        assert supervisor_state(layout)["epoch"] == 101
        resize_to(layout, new, 101, ["worker-0", "worker-1"])
        wait_for(lambda: supervisor_state(layout).get("resize_serial") == 101, 20, "the second serial applied")
        assert both_running(layout) == regrouped
        assert [read_task_state(layout, "worker", i)["restarts"] for i in range(2)] == [1, 1]
        resize_to(layout, [w0, w1], 102, ["worker-0", "worker-1"])
        wait_for(lambda: supervisor_state(layout).get("resize_serial") == 102, 20, "the old plan given back")
        again = wait_for(lambda: both_running(layout), 20, "both tasks running again")
        assert again is not None and not set(again) & set(regrouped)
    finally:
        sup.terminate()
        sup.wait(timeout=20)
