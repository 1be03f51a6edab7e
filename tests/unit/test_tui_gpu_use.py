"""The dashboard shows GPU use per task (issue 35 item 3): the task table's `gpu mem` column (the memory a
task's own processes hold, `on CPU?` in words once a task planned on a GPU has settled holding none) and
the task screen's GPU lines. A synthetic event stream (events as a host writes them) on a fake clock.
"""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Static

from orchestrator.config.schema import Config
from orchestrator.monitor.events import Event, from_dict
from orchestrator.monitor.reducer import ClusterState
from orchestrator.plan.from_file import plan_config
from testkit.replay import FakeClock, ReplaySource
from tests.doubles import RecordingActions
from tests.helpers.dash import sync
from tui.app import DashboardApp
from tui.screens.task import TaskScreen

pytestmark = pytest.mark.timeout(60)
T0 = 1_700_000_000.0
GPUS = [{"index": 0, "uuid": "GPU-a", "util_pct": 97.0, "mem_used_mb": 30512.0, "mem_total_mb": 40960.0,
         "temp_c": 67.0, "power_w": 291.5},
        {"index": 1, "uuid": "GPU-b", "util_pct": 0.0, "mem_used_mb": 4.0, "mem_total_mb": 40960.0,
         "temp_c": 31.0, "power_w": 52.1}]


def _event(d: dict) -> Event:
    ev = from_dict(d)
    assert ev is not None
    return ev


def _app(seconds: int) -> tuple[DashboardApp, FakeClock]:
    """Host g (gpus [0, 1]): worker:0's processes hold 3000 MiB on GPU 0, worker:1's nothing, for `seconds`."""
    plan = plan_config(Config.model_validate({
        "training": {"command": "{python} prog.py"},
        "hosts": [{"name": "g", "address": "127.0.0.1", "roles": ["ps", "worker"], "gpus": [0, 1]}]}))
    st = ClusterState.from_plan(plan, "r", now=T0)
    events: list[tuple[float, Event]] = [
        (T0, _event({"kind": "task_state", "t": T0, "host": "g", "job": j, "task": i, "state": "running", "pid": p}))
        for j, i, p in (("ps", 0, 10), ("worker", 0, 11), ("worker", 1, 12))]
    for s in range(seconds + 1):
        t = T0 + s
        tasks = {"worker-0": {"procs": 2, "cpu_s": s, "cpu_moved_at": t, "gpu_mem": {"0": 3000.0}},
                 "worker-1": {"procs": 1, "cpu_s": s, "cpu_moved_at": t, "gpu_mem": {}},
                 "ps-0": {"procs": 1, "cpu_s": s, "cpu_moved_at": t, "gpu_mem": {}}}
        events += [(t, _event({"kind": "heartbeat", "t": t, "host": "g", "interval_s": 1.0})),
                   (t, _event({"kind": "host_sample", "t": t, "host": "g", "gpus": GPUS, "tasks": tasks,
                               "supervisor": {"alive": True, "state": "running"}}))]
    clock = FakeClock(T0 + 5)
    source = ReplaySource(st, events, clock)
    return DashboardApp(source, RecordingActions(), poll_on_timer=False), clock


def cell(app: DashboardApp, task: str, column: str) -> str:
    return str(app.query_one("#tasks", DataTable).get_cell(task, column))


@pytest.mark.parametrize("size", [(80, 24), (160, 50)], ids=["compact", "wide"])
@sync
async def test_table_shows_each_tasks_gpu_memory_and_on_cpu_in_words(size: tuple[int, int]) -> None:
    app, clock = _app(seconds=40)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        assert cell(app, "worker:0", "gmem") == "2.9G"
        assert cell(app, "worker:1", "gmem") == "0M"  # 5 s in: not settled, no judgement yet
        assert cell(app, "ps:0", "gmem") == "-"  # planned on the CPU
        clock.advance(30.0)
        app.refresh_state()
        await pilot.pause()
        assert cell(app, "worker:1", "gmem") == "on CPU?"
        assert cell(app, "worker:0", "gmem") == "2.9G"


@sync
async def test_task_screen_spells_out_the_gpus_and_on_cpu() -> None:
    app, clock = _app(seconds=40)
    clock.advance(30.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.query_one("#tasks", DataTable).focus()
        app.query_one("#tasks", DataTable).move_cursor(row=2)  # host order: ps:0, worker:0, worker:1
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, TaskScreen) and app.screen.task_name == "worker:1"
        head = str(app.screen.query_one("#task-head", Static).render())
        assert "GPU 1: util 0%  memory 4M/40.0G  this task 0M  31°C  52 W" in head
        assert "on CPU? planned on a GPU, but its processes hold no GPU memory" in head
        app.pop_screen()
        await pilot.pause()
        app.query_one("#tasks", DataTable).move_cursor(row=1)
        await pilot.press("enter")
        await pilot.pause()
        head = str(app.screen.query_one("#task-head", Static).render())
        assert "GPU 0: util 97%  memory 29.8G/40.0G  this task 2.9G  67°C  292 W" in head
        assert "on CPU?" not in head
