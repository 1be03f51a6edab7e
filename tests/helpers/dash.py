"""Dashboard test fixtures: synthetic scenarios replayed against a fake clock (no wall time on screen)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

from testkit.replay import FakeClock, ReplaySource
from testkit.synthetic import Scenario, build, sample_logs
from tests.doubles import RecordingActions
from tui.app import DashboardApp
from tui.task_actions import RestartPolicy

SCENARIOS: dict[str, tuple[Scenario, float]] = {
    # name: (scenario, seconds after start the clock shows)
    "healthy": (Scenario(workers=3, ps=1, hosts=2, gpus=True), 62.0),
    "stalled": (Scenario(workers=3, ps=1, hosts=2, stall="worker:1", stall_at=50.0), 62.0),
    "restart": (Scenario(workers=3, ps=1, hosts=2, kill="worker:2", kill_at=55.0), 62.0),
    "unreachable": (Scenario(workers=4, ps=2, hosts=2, lost_host="h1", lost_at=55.0), 62.0),
    "many": (Scenario(workers=200, ps=4, hosts=20, seconds=65), 62.0),
}


DEFAULT_POLICY = RestartPolicy("on-failure", 3)  # the plan's defaults


def make_app(name: str, *, at: float | None = None, readonly: bool = False, actions: RecordingActions | None = None,
             restart_policy: RestartPolicy | None = DEFAULT_POLICY) -> tuple[DashboardApp, FakeClock, ReplaySource]:
    sc, default_at = SCENARIOS[name]
    st, events = build(sc)
    clock = FakeClock(sc.start + (default_at if at is None else at))
    source = ReplaySource(st, events, clock, sample_logs(sc))
    app = DashboardApp(source, actions if actions is not None else RecordingActions(), readonly=readonly,
                       poll_on_timer=False, restart_policy=restart_policy)
    return app, clock, source


def sync(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test with asyncio.run (no pytest-asyncio plugin in this project)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return wrapper
