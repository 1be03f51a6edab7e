"""Dashboard driven by Textual's pilot from synthetic event streams and a fake clock."""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets import DataTable, Label, RichLog, Static

from orchestrator.monitor.reducer import ClusterState
from tests.doubles import RecordingActions
from tests.helpers.dash import make_app, sync
from training.telemetry.task_record import TaskRecord
from tui.app import DashboardApp
from tui.screens.confirm import ConfirmScreen
from tui.screens.task import TaskScreen
from tui.task_actions import RestartPolicy
from tui.widgets.ps_traffic import PsTrafficPanel

pytestmark = pytest.mark.timeout(60)


def cell(app: DashboardApp, task: str, column: str) -> str:
    table = app.query_one("#tasks", DataTable)
    return str(table.get_cell(task, column))


def header(app: DashboardApp) -> str:
    return str(app.query_one("#header", Static).render())


def log_text(app: DashboardApp) -> str:
    return "\n".join(strip.text for strip in app.query_one("#log", RichLog).lines)


@sync
async def test_healthy_run() -> None:
    app, _, _ = make_app("healthy")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        table = app.query_one("#tasks", DataTable)
        assert table.row_count == 4
        for w in ("worker:0", "worker:1", "worker:2"):
            assert "running" in cell(app, w, "state")
            assert float(cell(app, w, "sps")) > 0
            assert cell(app, w, "gpu").endswith("%")
        assert "running 4" in header(app) and "stalled 0" in header(app)
        ps_rows = app.query_one(PsTrafficPanel).rows
        assert ps_rows is not None and len(ps_rows) == 1
        name, host, m_in, a_in, m_out, a_out, peers = ps_rows[0]
        assert (name, host, peers) == ("ps:0", "p0", 2)
        assert all(v.endswith("k") for v in (m_in, a_in, m_out, a_out))  # measured and accounted, kB/s


@sync
async def test_stalled_worker() -> None:
    app, clock, _ = make_app("stalled", at=48.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert "running" in cell(app, "worker:1", "state")
        clock.advance(5.0)  # progress stopped at 50 s; 3 intervals later it is stalled
        app.refresh_state()
        await pilot.pause()
        assert "stalled" in cell(app, "worker:1", "state")
        assert "running" in cell(app, "worker:0", "state")
        assert "stalled 1" in header(app)
        assert "worker:1 on h1 stalled" in log_text(app)


@sync
async def test_killed_worker_restarts() -> None:
    app, clock, _ = make_app("restart", at=55.5)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert "exited -9" in cell(app, "worker:2", "state")
        clock.advance(1.0)
        app.refresh_state()
        await pilot.pause()
        assert "restarting" in cell(app, "worker:2", "state")
        assert cell(app, "worker:2", "rst") == "1"
        clock.advance(1.6)  # supervisor says running, no progress yet
        app.refresh_state()
        await pilot.pause()
        assert "starting" in cell(app, "worker:2", "state")
        clock.advance(3.0)
        app.refresh_state()
        await pilot.pause()
        assert "running" in cell(app, "worker:2", "state")
        text = log_text(app)
        assert "worker:2 on h0 exited (code -9)" in text
        assert "restarting (restart 1)" in text and "running again" in text


@sync
async def test_unreachable_host_keeps_last_values_and_app_alive() -> None:
    app, clock, _ = make_app("unreachable", at=54.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        before = cell(app, "worker:1", "sps")
        clock.advance(5.0)
        app.refresh_state()
        await pilot.pause()
        for w in ("worker:1", "worker:3"):  # on h1
            assert "unreachable" in cell(app, w, "state")
            assert cell(app, w, "age").endswith("!")
        assert cell(app, "worker:1", "sps") == before  # last value kept, marked stale
        assert "running" in cell(app, "worker:0", "state")
        assert "unreachable 2" in header(app)
        assert "host h1 unreachable" in log_text(app)
        clock.advance(30.0)
        app.refresh_state()
        await pilot.pause()
        assert app.is_running


@sync
async def test_two_hundred_tasks_update_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    app, clock, _ = make_app("many", at=60.0)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        table = app.query_one("#tasks", DataTable)
        assert table.row_count == 204
        assert "running 204" in header(app)
        updates: list[Any] = []
        cleared: list[Any] = []
        real_update = table.update_cell

        def counting_update(*a: Any, **k: Any) -> None:
            updates.append(a)
            real_update(*a, **k)

        monkeypatch.setattr(table, "update_cell", counting_update)
        monkeypatch.setattr(table, "clear", lambda *a, **k: cleared.append(a))
        clock.advance(1.0)
        app.refresh_state()
        await pilot.pause()
        assert not cleared  # same rows, same order: no rebuild
        assert updates, "changed cells are updated"
        total_cells = 204 * len(table.columns)
        assert len(updates) < total_cells / 2  # only cells whose text changed
        assert {a[1] for a in updates} <= {"step", "loss", "spark", "gpu", "sps", "eps", "age"}
        # rows off screen are caught up when they scroll into view
        order = app.tasks_table.order
        last = [n for n in order if n.startswith("worker")][-1]  # far below the first screen
        before = len(updates)
        table.move_cursor(row=order.index(last), animate=False)
        await pilot.pause()
        await pilot.pause()
        tv = app.state.tasks[last]  # type: ignore[union-attr]
        assert str(table.get_cell(last, "step")) == f"{tv.global_step:,}"
        assert any(a[0] == last for a in updates[before:])


@sync
async def test_enter_opens_task_screen_with_log_tail() -> None:
    app, _, _ = make_app("healthy")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, TaskScreen)
        assert app.screen.task_name == "worker:0"
        await app.workers.wait_for_complete()
        await pilot.pause()
        log = app.screen.query_one("#task-log", RichLog)
        assert any("INFO worker 0: step 2900" in s.text for s in log.lines)
        head = str(app.screen.query_one("#task-head", Static).render())
        assert "worker:0 on h0" in head and "running" in head
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, TaskScreen)


@sync
async def test_kill_asks_then_calls_the_orchestrator() -> None:
    actions = RecordingActions()
    app, _, _ = make_app("healthy", actions=actions)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("down")  # worker:1 (h0 holds worker:0 and worker:2; rows grouped by host)
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await pilot.pause()
        assert actions.calls == []
        await pilot.press("r")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        await app.workers.wait_for_complete()
        assert actions.calls == [("restart", "worker", 2)]


async def ask(app: DashboardApp, pilot: Any, *keys: str) -> str:
    """Press keys; return the question the confirm dialog asks (and leave it open)."""
    await pilot.pause()
    await pilot.press(*keys)
    await pilot.pause()
    assert isinstance(app.screen, ConfirmScreen)
    return app.screen.question


@sync
async def test_kill_says_the_supervisor_restarts_it_with_the_restarts_left() -> None:
    app, _, _ = make_app("restart", restart_policy=RestartPolicy("on-failure", 3))
    async with app.run_test(size=(80, 24)) as pilot:
        text = await ask(app, pilot, "down", "k")  # worker:2, killed once and restarted by the scenario
        assert text == ("Kill worker:2 (SIGKILL)? The supervisor will restart it "
                        "(restart = on-failure, 2 of 3 restarts left).")
        assert str(app.screen.query_one("#question", Label).render()).startswith("Kill worker:2 (SIGKILL)?")
        await pilot.press("escape")
        text = await ask(app, pilot, "r")
        assert text.startswith("Restart worker:2 (SIGTERM)? The supervisor will restart it (restart = on-failure, "
                               "2 of 3 restarts left), unless it ends cleanly (exit 0) on SIGTERM")


@sync
async def test_kill_says_it_is_not_restarted_under_never_or_when_the_restarts_are_used() -> None:
    app, _, _ = make_app("restart", restart_policy=RestartPolicy("never", 3))
    async with app.run_test(size=(80, 24)) as pilot:
        text = await ask(app, pilot, "k")
        assert text == "Kill worker:0 (SIGKILL)? It will not be restarted (restart = never)."
    app, _, _ = make_app("restart", restart_policy=RestartPolicy("on-failure", 1))
    async with app.run_test(size=(80, 24)) as pilot:
        text = await ask(app, pilot, "down", "r")
        assert text == "Restart worker:2 (SIGTERM)? It will not be restarted (restart = on-failure, 1 of 1 restarts used)."


@sync
async def test_stop_for_good_asks_then_calls_stop_task() -> None:
    actions = RecordingActions()
    app, _, _ = make_app("healthy", actions=actions,
                         restart_policy=RestartPolicy("on-failure", 3, frozenset({"ps:0", "worker:0"})))
    async with app.run_test(size=(80, 24)) as pilot:
        text = await ask(app, pilot, "down", "x")
        assert text == ("Stop worker:2 for good (SIGTERM)? It will not be restarted; the run goes on without it "
                        "and can still end `finished`.")
        await pilot.press("n")
        await pilot.pause()
        assert actions.calls == []
        await ask(app, pilot, "x")
        await pilot.press("y")
        await pilot.pause()
        await app.workers.wait_for_complete()
        assert actions.calls == [("stop", "worker", 2)]
        text = await ask(app, pilot, "down", "down", "x")  # ps:0: rows are grouped by host (h0, h1, p0)
        assert text == ("Stop ps:0 for good (SIGTERM)? It will not be restarted; the run cannot go on without it: "
                        "it ends `stopped`, its other tasks stopped too.")


@sync
async def test_readonly_refuses_actions() -> None:
    actions = RecordingActions()
    app, _, _ = make_app("healthy", actions=actions, readonly=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("k")
        await pilot.press("r")
        await pilot.press("x")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        assert actions.calls == []
        assert "read-only" in header(app)


@sync
async def test_sort_filter_interval_pause_quit() -> None:
    app, clock, source = make_app("unreachable", at=60.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        table = app.query_one("#tasks", DataTable)
        await pilot.press("s")
        assert app.tasks_table.sort_key == "task"
        await pilot.press("s")
        await pilot.pause()
        assert app.tasks_table.sort_key == "state"
        first = str(table.get_row_at(0)[1])
        assert first in ("ps:0", "ps:1", "worker:0", "worker:2")  # running sorts before unreachable
        await pilot.press("slash")
        await pilot.press(*"h1")
        await pilot.press("enter")
        await pilot.pause()
        assert table.row_count == 2 and "filter: h1" in header(app)
        await pilot.press("slash")
        await pilot.press("escape")
        await pilot.pause()
        assert table.row_count == 6
        await pilot.press("plus")
        assert app.interval == 0.5
        await pilot.press("minus", "minus")
        assert app.interval == 2.0
        await pilot.press("p")
        polls = source.polls
        clock.advance(5)
        app.refresh_state()
        assert source.polls == polls and "PAUSED" in header(app)
        await pilot.press("p")
        assert source.polls == polls + 1
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


class BrokenSource:
    def __init__(self) -> None:
        self.state = ClusterState(now=0.0)
        self.calls = 0

    def poll(self) -> ClusterState:
        self.calls += 1
        if self.calls > 1:
            raise ConnectionError("stream gone")
        return self.state

    def task_log(self, job: str, task: int, lines: int = 200) -> list[str]:
        raise ConnectionError("host gone")

    def close(self) -> None:
        pass


@sync
async def test_source_errors_never_close_the_app() -> None:
    app = DashboardApp(BrokenSource(), None, poll_on_timer=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.refresh_state()
        app.refresh_state()
        await pilot.pause()
        assert app.is_running and app.source_errors == 2


@sync
async def test_ps_task_screen_shows_measured_accounted_and_peers() -> None:
    app, _, _ = make_app("unreachable")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("down", "down", "down", "down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, TaskScreen) and app.screen.task_name == "ps:0"
        head = str(app.screen.query_one("#task-head", Static).render())
        assert "in 425.0 kB/s (accounted 400.0 kB/s)" in head
        # each peer's rate is smoothed as the PS's own (its host's measurement): together they make the PS's
        assert "127.0.0.2 213k/218k" in head and "127.0.0.3 213k/218k" in head


@sync
async def test_a_task_stopped_for_good_shows_stopped_and_the_log_says_by_whom() -> None:
    app, clock, source = make_app("healthy")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        last = max([a for a, _ in source._pending] + [clock.now])  # replayed arrivals never go back in time
        source.push(last, TaskRecord(last, "h1", "worker", 1, "exited", pid=4242, signal=15, stopped_by="user"))
        clock.now = last + 0.5
        app.refresh_state()
        await pilot.pause()
        assert cell(app, "worker:1", "state") == "■ stopped"
        assert "worker:1 on h1 exited (code -15, stopped for good by the user)" in log_text(app)
        assert "running" in cell(app, "worker:0", "state")
