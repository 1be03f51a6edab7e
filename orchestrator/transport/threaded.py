"""`threaded_fan_out(keys, fn, limit)`: fn(key) for every host at once in this process's threads, each
host's result or HostError (orchestrator.transport.fan_out is the entry point; the shards' workers call
this directly).

A bounded thread pool (hosts wait on the network, and Paramiko releases the GIL while they do), one
host's fault is that host's result and never hides the others', and the calling thread wakes every 0.2 s
so that Ctrl-C reaches it promptly: `on_interrupt` runs (e.g. set a cancel flag), the workers get
`interrupt_grace` seconds to notice, and KeyboardInterrupt is raised again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import TypeVar

from orchestrator.errors import HostError

T = TypeVar("T")
DEFAULT_LIMIT = 64  # threads; more hosts than this queue for a free thread
WAKE_S = 0.2


def threaded_fan_out(
    keys: Sequence[str],
    fn: Callable[[str], T],
    *,
    limit: int = DEFAULT_LIMIT,
    on_done: Callable[[str, T | HostError], None] | None = None,
    on_interrupt: Callable[[], None] | None = None,
    interrupt_grace: float = 30.0,
    thread_name: str = "tfcluster",
) -> dict[str, T | HostError]:
    """{key: fn(key) or the HostError it raised}, in the order of `keys`. Any other exception is
    that host's HostError(reason="error") too: one broken host must not take the command down."""
    if not keys:
        return {}

    def guarded(key: str) -> T | HostError:
        try:
            result: T | HostError = fn(key)
        except HostError as exc:
            result = exc
        except Exception as exc:
            result = HostError(key, "error", f"{type(exc).__name__}: {exc}")
        if on_done is not None:
            on_done(key, result)
        return result

    pool = ThreadPoolExecutor(max_workers=max(1, min(limit, len(keys))), thread_name_prefix=thread_name)
    futures: dict[str, Future[T | HostError]] = {key: pool.submit(guarded, key) for key in keys}
    try:
        pending = set(futures.values())
        while pending:
            _, pending = wait_futures(pending, timeout=WAKE_S)
    except KeyboardInterrupt:
        if on_interrupt is not None:
            on_interrupt()
        wait_futures(futures.values(), timeout=interrupt_grace)
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return {key: future.result() for key, future in futures.items()}
