"""`fan_out(keys, fn, limit)`: run fn(key) for every host at once, each host's result or HostError.

The one way every command visits many hosts (check, start's phases, status, stop, logs): threads in this
process (orchestrator.transport.threaded: bounded, one host's fault is only that host's result, Ctrl-C
handled promptly). With `shardable` (the per-host work is all in fn's result), hosts beyond what one
process handles well are spread over worker processes (orchestrator.transport.shards); on_done still
runs in this process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from orchestrator.errors import HostError
from orchestrator.transport.shards import shard_count, sharded_fan_out
from orchestrator.transport.threaded import DEFAULT_LIMIT, threaded_fan_out

T = TypeVar("T")


def fan_out(
    keys: Sequence[str],
    fn: Callable[[str], T],
    *,
    limit: int = DEFAULT_LIMIT,
    on_done: Callable[[str, T | HostError], None] | None = None,
    on_interrupt: Callable[[], None] | None = None,
    interrupt_grace: float = 30.0,
    thread_name: str = "tfcluster",
    shardable: bool = False,
) -> dict[str, T | HostError]:
    """{key: fn(key) or the HostError it raised}, in the order of `keys` (see threaded_fan_out)."""
    if shardable and keys:
        shards = shard_count(len(keys))
        if shards > 1:
            return sharded_fan_out(keys, fn, shards, limit=limit, on_done=on_done, thread_name=thread_name)
    return threaded_fan_out(keys, fn, limit=limit, on_done=on_done, on_interrupt=on_interrupt,
                            interrupt_grace=interrupt_grace, thread_name=thread_name)
