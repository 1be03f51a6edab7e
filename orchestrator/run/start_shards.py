"""`start` over worker processes (transport.shards) when hosts outnumber what one process handles well,
with the same two-phase semantics as in one process (run.start_host.StartShard):

1. every worker prepares its hosts and holds their commands at the barrier; the parent hears each
   host's outcome as it comes (and each progress step: one display, the parent's); every host's
   prepare ends, failed or not, so that the error names every host that cannot start;
2. once every worker has reported, the parent alone decides which hosts go (`launch(names)`) or that
   none does (`release()`), and hears the launch outcomes the same way, telling every worker to
   cancel as soon as a launch fails (unless partial starts are allowed).
Ctrl-C reaches the parent only: it tells the workers to cancel, waits for their last outcomes (at most
`op_timeout`), and lets `start` roll back. A worker whose parent died cancels what it had not launched.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from orchestrator.errors import HostError
from orchestrator.plan.model import HostPlan
from orchestrator.run.start_host import HostOutcome, StartContext, StartShard
from orchestrator.transport.factory import Opener
from orchestrator.transport.shards import ShardLink, Shards, split


def _worker(ctx: StartContext, hosts: list[HostPlan], opener: Opener, link: ShardLink) -> None:
    def progress(host: str, phase: str, done: int, total: int) -> None:
        link.send(("progress", host, phase, done, total))

    mine = dataclasses.replace(ctx, progress=progress, cancel=link.cancelled)
    shard = StartShard(mine, hosts, opener, on_outcome=lambda outcome: link.send(("outcome", outcome)))
    try:
        shard.prepare()
        link.send(("prepared",))
        link.flush()
        order = link.order()
        if isinstance(order, tuple) and order[0] == "go":
            if order[2] is not None:  # --auto-ports re-planned: the new run files
                shard.replan(order[2])
            shard.launch(list(order[1]), extend=float(order[3]))
        else:  # ("release",), or the parent is gone: nothing more starts
            shard.release()
        link.send(("launched",))
    finally:
        shard.close()


class ShardedStart:
    """The parent's side; the same interface as StartShard: outcomes, prepare, launch, release, close."""

    def __init__(self, ctx: StartContext, hosts: list[HostPlan], opener: Opener, shards: int) -> None:
        self.ctx = ctx
        shipped = len(ctx.files.tree) + len(ctx.files.package)
        self.outcomes = {h.name: HostOutcome(h.name, shipped=shipped) for h in hosts}
        by_name = {h.name: h for h in hosts}
        self.groups = split([h.name for h in hosts], shards)
        self.shards = Shards(self.groups, lambda keys, link: _worker(ctx, [by_name[k] for k in keys], opener, link))
        self.run_file: Callable[[str], bytes] | None = None  # re-planned run files, sent with `go`

    def _pump(self, end: str, deadline: float | None = None, cancel_on_failure: bool = False) -> None:
        """Take every worker's messages until each has said `end` (or ended, or the deadline passed)."""
        waiting = set(range(len(self.groups)))
        for worker, message in self.shards.messages(
                until=lambda: not waiting or (deadline is not None and time.monotonic() > deadline)):
            if message is None:
                if worker in waiting:  # it ended without finishing the phase
                    waiting.discard(worker)
                    self._lost_worker(worker)
                continue
            assert isinstance(message, tuple)
            kind = message[0]
            if kind == "progress":
                self.ctx.progress(*message[1:])
            elif kind == "outcome":
                outcome: HostOutcome = message[1]
                self.outcomes[outcome.host] = outcome
                if cancel_on_failure and outcome.error is not None and outcome.error.reason != "cancelled" \
                        and not self.ctx.allow_partial:
                    self.shards.broadcast(("cancel",))
            elif kind == end:
                waiting.discard(worker)

    def _lost_worker(self, worker: int) -> None:
        for name in self.groups[worker]:
            out = self.outcomes[name]
            if not out.ok and out.error is None:
                out.error = HostError(name, "error", "its worker process exited before reporting")

    def _guarded(self, end: str, cancel_on_failure: bool) -> None:
        try:
            self._pump(end, cancel_on_failure=cancel_on_failure)
        except KeyboardInterrupt:
            self.ctx.cancel.set()
            self.shards.broadcast(("cancel",))
            self._pump(end, deadline=time.monotonic() + self.ctx.op_timeout)
            raise

    def prepare(self) -> None:
        self._guarded("prepared", cancel_on_failure=False)  # every host's prepare ends: the error names all

    def launch(self, names: list[str], extend: float = 0.0) -> None:
        go = set(names)
        self.ctx.deadline += extend
        for worker, keys in enumerate(self.groups):
            self.shards.tell(worker, ("go", [k for k in keys if k in go], self.run_file, extend))
        self._guarded("launched", cancel_on_failure=True)

    def replan(self, run_file: Callable[[str], bytes]) -> None:
        self.run_file = run_file

    def release(self, names: list[str] | None = None) -> None:
        self.shards.broadcast(("release",))
        self._pump("launched", deadline=time.monotonic() + self.ctx.op_timeout)

    def close(self) -> None:
        self.shards.close(grace=self.ctx.op_timeout)
