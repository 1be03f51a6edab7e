"""SummaryFollower: a local copy of a run's TensorBoard event files, brought up to date every `interval`.

Each sync is one command per host (orchestrator/results/remote_files.py, without hashing: event files
only grow, so only their new bytes travel), over one connection per host kept between syncs and opened
again after a failure. Layout here: `<task>/` for each task's run (training/telemetry/task_summaries.py)
and `logdir/<host>/...` for the user's own `[training] logdir`: TensorBoard names its runs by these paths.
A host that cannot be reached is reported through `on_change` (once, and again when it is back) and tried
again next time; what was copied stays, so TensorBoard keeps working when the run's hosts are gone. When
the run's record disappears (`stop --purge`) the follower stops by itself (`gone`). `close()` closes every
host's command (killed there) and connection.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path

from orchestrator.errors import HostError
from orchestrator.results.remote_files import Fetched, HostFiles, Root
from orchestrator.results.sources import by_host, summary_sources
from orchestrator.run import records
from orchestrator.transport.base import Transport
from orchestrator.transport.factory import Opener, transport_for
from orchestrator.transport.fan_out import fan_out

ChangeCallback = Callable[[str, str | None], None]  # (host, problem or None once it is fine again)


class SummaryFollower:
    def __init__(self, record: records.RunRecord, local: Path, *, interval: float = 5.0,
                 opener: Opener = transport_for, on_change: ChangeCallback | None = None) -> None:
        self.record = record
        self.local = local
        self.interval = interval
        self.groups = by_host(summary_sources(record, tasks_to="", logdir_to="logdir", events_only=True))
        self.problems: dict[str, str] = {}  # hosts whose last sync failed, and why
        self.gone = False  # the run's record was removed (purged): nothing more to follow
        self._opener = opener
        self._on_change = on_change
        self._transports: dict[str, Transport] = {}
        self._active: dict[str, HostFiles] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def hosts(self) -> list[str]:
        return list(self.groups)

    def sync(self) -> dict[str, Fetched | HostError]:
        """Bring every host's event files here once."""
        results = fan_out(self.hosts, self._sync_host, on_interrupt=self._cancel_all, interrupt_grace=10.0,
                          thread_name="tfcluster-summaries")
        for host, result in results.items():
            if self._stop.is_set():
                break  # closing: a command cut short is not the host's trouble
            if isinstance(result, HostError):
                problem: str | None = result.one_line()
            else:
                problem = f"host {host}: " + "; ".join(result.warnings[:3]) if result.warnings else None
            if problem != self.problems.get(host):
                if problem is None:
                    self.problems.pop(host, None)
                else:
                    self.problems[host] = problem
                if self._on_change is not None:
                    self._on_change(host, problem)
        return results

    def _sync_host(self, name: str) -> Fetched:
        if self._stop.is_set():
            raise HostError(name, "cancelled", "stopped")
        host = self.record.plan.host(name)
        transport = self._transports.get(name) or self._opener(host)
        self._transports[name] = transport
        files = self._active[name] = HostFiles(transport, host.python, line_timeout=60.0)
        roots = [Root(s.remote, self.local / s.local, s.match) for s in self.groups[name]]
        try:
            return files.fetch(roots, verify=False)
        except HostError:
            self._transports.pop(name, None)
            transport.close()  # the next sync connects again
            raise

    def start(self) -> SummaryFollower:
        """Sync every `interval` in a thread until close() (or the run is purged)."""
        self._thread = threading.Thread(target=self._run, name="tfcluster-follow", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if not records.exists(self.record.run_id):
                self.gone = True
                return
            self.sync()

    def _cancel_all(self) -> None:
        for files in list(self._active.values()):
            files.cancel()

    def close(self) -> None:
        self._stop.set()
        self._cancel_all()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        for transport in list(self._transports.values()):
            with contextlib.suppress(Exception):  # on the way out: a broken connection is closed anyway
                transport.close()
        self._transports.clear()
