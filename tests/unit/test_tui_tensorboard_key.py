"""The dashboard's `t`: it opens the run's TensorBoard through the callable the CLI gives it, once, and the
header shows the URL; without that callable the key is neither shown nor acted on."""

from __future__ import annotations

import threading

import pytest
from textual.widgets import Static

from tests.helpers.dash import make_app, sync

pytestmark = pytest.mark.timeout(60)


@sync
async def test_t_opens_tensorboard_once_and_the_header_shows_its_url() -> None:
    app, _, _ = make_app("healthy")
    calls: list[int] = []
    release = threading.Event()

    def opener() -> str:
        calls.append(1)
        release.wait(10)  # opening copies summaries first: slow, so it runs off the UI thread
        return "http://127.0.0.1:6006/"

    app.open_tensorboard = opener
    async with app.run_test(size=(100, 24)) as pilot:
        await pilot.pause()
        assert app.check_action("tensorboard", ()) is True
        await pilot.press("t")
        await pilot.press("t")  # a second press while it opens starts nothing more
        release.set()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert calls == [1]
        assert app.settings.tensorboard_url == "http://127.0.0.1:6006/"
        assert "TensorBoard http://127.0.0.1:6006/" in str(app.query_one("#header", Static).render())
        await pilot.press("t")  # open already: it only says where
        await app.workers.wait_for_complete()
        assert calls == [1]


@sync
async def test_without_an_opener_the_key_is_hidden_and_does_nothing() -> None:
    app, _, _ = make_app("healthy")
    async with app.run_test(size=(100, 24)) as pilot:
        await pilot.pause()
        assert app.check_action("tensorboard", ()) is False
        await pilot.press("t")
        await pilot.pause()
        assert app.settings.tensorboard_url == ""
        assert "TensorBoard" not in str(app.query_one("#header", Static).render())
