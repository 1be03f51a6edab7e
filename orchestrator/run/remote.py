"""Per-host remote operations of a run after its start (stop, verify and purge), each one command,
with retries on a lost connection. (`start`'s own conversation is orchestrator.run.start_host; reading
a run is orchestrator.run.read_host.)

The work on the host is a POSIX sh script (orchestrator/run/sh_stop.py): one command whatever the
number of tasks, and no Python started on a host that may be busy training or have lost its python.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from orchestrator.errors import HostError, Reason
from orchestrator.plan.model import HostPlan
from orchestrator.run.sh_stop import parse_sh_stop, sh_stop_script
from orchestrator.transport.base import CommandResult, Transport
from orchestrator.transport.connect_policy import ConnectFailed
from orchestrator.transport.factory import Opener, transport_for
from training.run.layout import RunLayout
from training.telemetry.state_files import StopReport

T = TypeVar("T")
# The only reasons worth trying again for: the connection, not the host's answer. Anything else (auth,
# host keys, a command that failed, a cancelled start) needs the user, and retrying would only hide it.
TRANSIENT_REASONS: set[Reason] = {"lost", "timeout", "refused", "unreachable"}


# A host that refuses or cannot be routed to is most likely down: a few quick tries, not the whole budget.
DOWN_REASONS: set[Reason] = {"refused", "unreachable"}
DOWN_ATTEMPTS = 3


def with_retry(host: str, fn: Callable[[], T], deadline: float, *, first_delay: float = 0.2) -> T:
    """Call fn until it succeeds; on a transient HostError (TRANSIENT_REASONS: a lost connection, a
    timeout) wait with exponential backoff, never past `deadline` (time.monotonic()): then the last
    error is raised. A host that refuses connections is given DOWN_ATTEMPTS tries, not the budget; a
    failed connect over SSH (ConnectFailed) is not tried again: the transport made the tries worth making."""
    delay = first_delay
    down = 0
    while True:
        try:
            return fn()
        except ConnectFailed:
            raise  # the transport made the connect tries worth making (transport.connect_policy)
        except HostError as exc:
            down += exc.reason in DOWN_REASONS
            if exc.reason not in TRANSIENT_REASONS or down >= DOWN_ATTEMPTS or time.monotonic() + delay >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


@dataclass(frozen=True)
class StopVerdict:
    report: StopReport  # what the stop signalled, and what a fresh look saw left running afterwards
    purged: bool


class RemoteRun:
    """One host's side of one run, over one transport that is reopened after a lost connection."""

    def __init__(self, host: HostPlan, run_dir: str, opener: Opener = transport_for) -> None:
        self.host = host
        self.layout = RunLayout(run_dir)
        self._opener = opener
        self._transport: Transport | None = None

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            self._transport = self._opener(self.host)
        return self._transport

    def close(self) -> None:
        if self._transport is not None:
            try:
                self._transport.close()
            finally:
                self._transport = None

    def run_shell(self, script: str, timeout: float, stdin: bytes | None = None) -> CommandResult:
        """One shell script on the host; a HostError drops the connection, so a retry reconnects."""
        try:
            return self.transport.run_shell(script, timeout=timeout, stdin=stdin)
        except HostError:
            self.close()
            raise

    def stop(self, grace: float, timeout: float, *, purge: bool = False) -> StopVerdict:
        """One command: the supervisor asked to stop (SIGTERM), `grace`, SIGKILL for what is left, a
        fresh look at the host's processes and, with `purge`, the run dir removed when nothing is left."""
        result = self.run_shell(sh_stop_script(self.layout.root, grace, purge), timeout + grace + 10)
        report, purged = parse_sh_stop(self.host.name, result)
        return StopVerdict(report, purged or (report.absent and purge))
