"""`pull`: copy a run's checkpoints, logs and summaries to a directory here, every host at once.

One command per host (orchestrator/results/remote_files.py: streamed, resumable, checked by sha256); a
lost connection is tried again (at most ATTEMPTS times), and what had arrived is not sent again. Layout
under the destination: `checkpoints/` (the chief's checkpoint dir: `tf.train.Checkpoint` or a `Saver`
restores from it as it is), `logs/`, `summaries/<task>/`, `logdir/<host>/` (orchestrator/results/sources.py).
Ctrl-C closes every host's command (nothing is left running there) and keeps what arrived whole.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from orchestrator.errors import HostError, UsageError
from orchestrator.results.remote_files import Fetched, HostFiles, Root, private_dirs
from orchestrator.results.sources import KINDS, Kind, by_host, sources
from orchestrator.run.records import RunRecord
from orchestrator.run.remote import TRANSIENT_REASONS
from orchestrator.transport.connect_policy import ConnectFailed
from orchestrator.transport.factory import Opener, transport_for
from orchestrator.transport.fan_out import fan_out

ATTEMPTS = 3


def pull(record: RunRecord, dest: Path, kinds: tuple[Kind, ...] = KINDS, *, opener: Opener = transport_for,
         on_host: Callable[[str, Fetched | HostError], None] | None = None) -> dict[str, Fetched | HostError]:
    """{host: what arrived, or why not}, for every host that holds some of `kinds`."""
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest}: exists and is not a directory")
    private_dirs(dest)
    groups = by_host(sources(record, kinds))
    active: dict[str, HostFiles] = {}
    interrupted = threading.Event()

    def one(name: str) -> Fetched:
        host = record.plan.host(name)
        roots = [Root(s.remote, dest / s.local, s.match) for s in groups[name]]
        for attempt in range(1, ATTEMPTS + 1):
            transport = opener(host)
            files = active[name] = HostFiles(transport, host.python)
            try:
                if interrupted.is_set():
                    raise HostError(name, "cancelled", "interrupted")
                return files.fetch(roots, verify=True)
            except HostError as exc:
                if exc.reason not in TRANSIENT_REASONS or attempt == ATTEMPTS or isinstance(exc, ConnectFailed):
                    raise
            finally:
                transport.close()
        raise AssertionError("unreachable")  # the loop returns or raises

    def cancel_all() -> None:
        interrupted.set()
        for files in list(active.values()):
            files.cancel()

    return fan_out(list(groups), one, on_done=on_host, on_interrupt=cancel_all, interrupt_grace=10.0,
                   thread_name="tfcluster-pull")
