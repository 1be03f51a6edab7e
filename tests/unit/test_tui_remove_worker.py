"""`x` on a worker of a run that can be resized offers "remove it from the run" beside "stop" (issue 37 item
3), driven by Textual's pilot over a replayed run (tests/helpers/dash.py).

Why the removal is a fake here: what is under test is the dashboard's part only (which rows offer the
choice, what it asks, that picking "remove" calls the removal with that task, off the UI thread, and that
the outcome reaches the event log). The removal itself is a resize of a real run, tested over real sshd
machines (tests/integration/test_resize_sshd.py, test_resize_killed.py), its plan in
tests/unit/test_without_worker.py; a replayed run has no hosts to resize. The fake keeps the real rule of
which tasks can go (orchestrator.plan.without_worker.removable: workers, not the chief worker)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from textual.widgets import RichLog

from tests.doubles import RecordingActions
from tests.helpers.dash import make_app, sync
from tui.app import DashboardApp
from tui.screens.confirm import ConfirmScreen
from tui.screens.stop_or_remove import StopOrRemoveScreen

pytestmark = pytest.mark.timeout(60)


class FakeRemoval:
    """Records what it was asked, and on which thread; `fail` makes `remove` raise as a failed resize does."""

    def __init__(self, fail: str = "") -> None:
        self.fail = fail
        self.asked: list[str] = []
        self.removed: list[tuple[str, bool]] = []  # (task, on the UI thread)

    def can_remove(self, name: str) -> bool:
        self.asked.append(name)
        return name.startswith("worker:") and name != "worker:0"  # worker:0 is the chief worker here

    def preview(self, name: str) -> list[str]:
        return [f"{name} on h0 is stopped"]

    def remove(self, name: str) -> str:
        self.removed.append((name, threading.current_thread() is threading.main_thread()))
        if self.fail:
            raise RuntimeError(self.fail)
        return f"removed {name} from the run"


def _app(removal: FakeRemoval, actions: RecordingActions, readonly: bool = False) -> DashboardApp:
    app, _, _ = make_app("healthy", actions=actions, readonly=readonly)
    app.removal = removal
    return app


async def _press(pilot: Any, *keys: str) -> None:
    await pilot.pause()
    await pilot.press(*keys)
    await pilot.pause()


def _log(app: DashboardApp) -> str:
    return "\n".join(strip.text for strip in app.query_one("#log", RichLog).lines)


@sync
async def test_ps_and_chief_rows_get_the_stop_question_only() -> None:
    removal, actions = FakeRemoval(), RecordingActions()
    app = _app(removal, actions)
    async with app.run_test(size=(100, 30)) as pilot:
        await _press(pilot, "x")  # worker:0: the chief worker
        assert isinstance(app.screen, ConfirmScreen) and app.screen.question.startswith("Stop worker:0 for good")
        await _press(pilot, "escape", "down", "down", "down", "x")  # ps:0 (rows grouped by host: h0, h1, p0)
        assert isinstance(app.screen, ConfirmScreen) and app.screen.question.startswith("Stop ps:0 for good")
        await _press(pilot, "escape")
    assert removal.asked == ["worker:0", "ps:0"] and removal.removed == [] and actions.calls == []


@sync
async def test_a_worker_row_offers_stop_or_remove() -> None:
    removal, actions = FakeRemoval(), RecordingActions()
    app = _app(removal, actions)
    async with app.run_test(size=(100, 30)) as pilot:
        await _press(pilot, "down", "x")  # worker:2
        assert isinstance(app.screen, StopOrRemoveScreen) and app.screen.task_name == "worker:2"
        await _press(pilot, "escape")  # nothing
        assert not isinstance(app.screen, StopOrRemoveScreen | ConfirmScreen)

        await _press(pilot, "x", "s")  # stop: the dashboard's own stop-for-good question
        assert isinstance(app.screen, ConfirmScreen) and app.screen.question.startswith("Stop worker:2 for good")
        await _press(pilot, "y")
        await app.workers.wait_for_complete()
        assert actions.calls == [("stop", "worker", 2)] and removal.removed == []

        await _press(pilot, "x", "r")  # remove: asked, listing what the resize does
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.question == "Remove worker:2 from the run (a resize)? It does: worker:2 on h0 is stopped."
        await _press(pilot, "n")
        assert removal.removed == []
        await _press(pilot, "x", "r", "y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert removal.removed == [("worker:2", False)]  # off the UI thread
        assert "removing worker:2 from the run..." in _log(app) and "removed worker:2 from the run" in _log(app)
    assert actions.calls == [("stop", "worker", 2)]


@sync
async def test_a_failed_removal_is_said_in_the_event_log() -> None:
    removal = FakeRemoval(fail="m2: unreachable (resize undone: nothing was started)")
    app = _app(removal, RecordingActions())
    async with app.run_test(size=(100, 30)) as pilot:
        await _press(pilot, "down", "down", "x", "r", "y")  # worker:1
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert removal.removed == [("worker:1", False)]
        assert "remove worker:1 failed: m2: unreachable (resize undone: nothing was started)" in _log(app)
        assert app.is_running  # never fatal


@sync
async def test_a_readonly_dashboard_offers_nothing() -> None:
    removal, actions = FakeRemoval(), RecordingActions()
    app = _app(removal, actions, readonly=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await _press(pilot, "down", "x")
        assert not isinstance(app.screen, StopOrRemoveScreen | ConfirmScreen)
    assert removal.removed == [] and actions.calls == []
