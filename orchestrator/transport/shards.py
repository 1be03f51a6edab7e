"""Shards: one command's hosts split over worker processes when they outnumber what one Python
process handles well.

Why: an SSH connection costs its client a few milliseconds of CPU (key exchange, Paramiko's packet
handling), almost all of it Python under one GIL; with hundreds of hosts one process is CPU-bound while
the other cores idle. `shard_count(hosts)` is 1 (no worker at all) up to `HOSTS_PER_PROCESS` hosts
(`TFCLUSTER_HOSTS_PER_PROCESS` overrides it), then one worker per started block of that many hosts, at
most one per usable core.

Workers are forked, so they inherit the command's state (plan, opener, files) with no pickling of it;
they ignore Ctrl-C, SIGTERM and SIGHUP (the parent decides and tells them) and talk to the parent over
a pipe: `ShardLink` in a worker (sends batched every 50 ms, a reader thread for the parent's orders,
`cancelled` set by a "cancel" order or by the parent's end), `Shards` in the parent (every worker's
messages as they come, waking every 0.2 s so that Ctrl-C reaches the parent promptly). Results and
messages must pickle (HostError does). The parent alone shows progress and writes the run record.
`sharded_fan_out` is transport.fan_out over shards, for commands whose per-host work is all in its result.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.errors import HostError
from orchestrator.transport.threaded import threaded_fan_out

if TYPE_CHECKING:  # multiprocessing costs every command ~50 ms to import; only sharded ones need it
    from multiprocessing.connection import Connection

T = TypeVar("T")
HOSTS_PER_PROCESS_ENV = "TFCLUSTER_HOSTS_PER_PROCESS"
HOSTS_PER_PROCESS = 64
FLUSH_S = 0.05
WAKE_S = 0.2


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def shard_count(hosts: int) -> int:
    per = int(os.environ.get(HOSTS_PER_PROCESS_ENV) or HOSTS_PER_PROCESS)
    return max(1, min(usable_cores(), math.ceil(hosts / max(1, per))))


def split(keys: Sequence[str], shards: int) -> list[list[str]]:
    """Round-robin, so every worker gets a share of any slow stretch of the host list."""
    return [list(keys[i::shards]) for i in range(shards) if keys[i::shards]]


class ShardLink:
    """A worker's end of the pipe: `send` (batched), `order()` (the parent's next order, None once the
    parent is gone), `cancelled` (a "cancel" order came, or the parent is gone)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self._buffer: list[object] = []
        self._orders: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._closed = threading.Event()
        self.cancelled = threading.Event()
        threading.Thread(target=self._read, daemon=True, name="shard-orders").start()
        threading.Thread(target=self._flush_often, daemon=True, name="shard-flush").start()

    def send(self, message: object) -> None:
        with self._lock:
            self._buffer.append(message)

    def flush(self) -> None:
        with self._lock:
            batch, self._buffer = self._buffer, []
            if batch:
                with contextlib.suppress(OSError, ValueError):  # the parent is gone: nobody to tell
                    self._conn.send(batch)

    def _flush_often(self) -> None:
        while not self._closed.wait(FLUSH_S):
            self.flush()

    def _read(self) -> None:
        while True:
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                self.cancelled.set()
                self._orders.put(None)
                return
            if message == ("cancel",):
                self.cancelled.set()
            else:
                self._orders.put(message)

    def order(self) -> object:
        return self._orders.get()

    def close(self) -> None:
        self._closed.set()
        self.flush()


def _worker_main(target: Callable[[list[str], ShardLink], None], keys: list[str], conn: Connection,
                 parent_end: Connection) -> None:
    parent_end.close()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    link = ShardLink(conn)
    try:
        target(keys, link)
    finally:
        link.close()


class Shards:
    """The parent's side: forked workers, each running `target(its keys, its ShardLink)`."""

    def __init__(self, groups: list[list[str]], target: Callable[[list[str], ShardLink], None]) -> None:
        import multiprocessing

        context = multiprocessing.get_context("fork")
        self.groups = groups
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        for keys in groups:
            parent_end, child_end = context.Pipe()
            proc = context.Process(target=_worker_main, args=(target, keys, child_end, parent_end), daemon=True,
                                   name="tfcluster-shard")
            proc.start()
            child_end.close()
            self._conns.append(parent_end)
            self._procs.append(proc)
        self._open = set(range(len(groups)))

    def messages(self, until: Callable[[], bool] = lambda: False) -> Iterator[tuple[int, object]]:
        """(worker, message) as they come; (worker, None) once when a worker's pipe ends. Stops when every
        pipe has ended or `until()` is true after a batch."""
        from multiprocessing.connection import wait

        while self._open and not until():
            ready = wait([self._conns[i] for i in self._open], timeout=WAKE_S)
            for conn in ready:
                i = self._conns.index(conn)  # type: ignore[arg-type]
                try:
                    batch = self._conns[i].recv()
                except (EOFError, OSError):
                    self._open.discard(i)
                    yield i, None
                    continue
                for message in batch:
                    yield i, message

    def tell(self, worker: int, message: object) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._conns[worker].send(message)

    def broadcast(self, message: object) -> None:
        for i in range(len(self._conns)):
            self.tell(i, message)

    def close(self, grace: float = 5.0) -> None:
        """Wait for the workers to end (they do once their work is done), then kill any that did not."""
        for proc in self._procs:
            proc.join(grace)
        for proc in self._procs:
            if proc.is_alive():
                proc.kill()
                proc.join(1.0)
        for conn in self._conns:
            conn.close()

    def __enter__(self) -> Shards:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(grace=0.0 if exc[0] is not None else 30.0)


def sharded_fan_out(keys: Sequence[str], fn: Callable[[str], T], shards: int, *, limit: int,
                    on_done: Callable[[str, T | HostError], None] | None, thread_name: str) -> dict[str, T | HostError]:
    """transport.fan_out over `shards` worker processes: fn runs in the workers, its results (which must
    pickle) come back; on_done runs here, in the parent, as they arrive."""

    def work(mine: list[str], link: ShardLink) -> None:
        threaded_fan_out(mine, fn, limit=limit, on_done=lambda key, result: link.send((key, result)), thread_name=thread_name)

    results: dict[str, T | HostError] = {}
    with Shards(split(keys, shards), work) as workers:
        for _, message in workers.messages():
            if message is None:
                continue
            key: str = message[0]  # type: ignore[index]
            result: T | HostError = message[1]  # type: ignore[index]
            results[key] = result
            if on_done is not None:
                on_done(key, result)
    for key in keys:
        if key not in results:  # its worker died before answering
            results[key] = HostError(key, "error", "its worker process exited without an answer")
            if on_done is not None:
                on_done(key, results[key])
    return {key: results[key] for key in keys}
