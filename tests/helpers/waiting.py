"""Waiting for an event, never for a fixed time: `wait_for` polls a predicate until it holds; its deadline
only bounds a failure (the assertion then says what never happened). The `interval` between two polls is
the only sleep a wait has: it paces the polling and orders nothing. `async_wait_for` is the same inside an
event loop (a Textual app under test runs while it waits)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.05,
             explain: Callable[[], str] | None = None) -> T:
    """The predicate's first truthy value; AssertionError naming `what` (and `explain()`) at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"\n{explain()}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}{detail}")
        time.sleep(interval)


async def async_wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.05,
                         pause: Callable[[float], Awaitable[object]] = asyncio.sleep) -> T:
    """wait_for inside an event loop: `pause(interval)` between two polls lets the loop's other tasks run
    (a Textual pilot's `pause`, which also lets the app's screen take its timer updates)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await pause(interval)
