"""Per-host remote operations of a run after its start (probe; stop, verify and purge), each one
command, with retries on a lost connection. (`start`'s own conversation is orchestrator.run.start_host.)

The work on the host is done by `training.supervisor --probe/--stop`, shipped with the run's code, so
a probe or a stop is one command whatever the number of tasks.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from orchestrator.errors import CommandFailed, HostError, Reason
from orchestrator.plan.model import HostPlan
from orchestrator.run.sh_stop import parse_sh_stop, sh_stop_script
from orchestrator.transport.base import CommandResult, Transport, shell_command
from orchestrator.transport.factory import Opener, transport_for
from training.run.layout import HOST_PACKAGE, RunLayout, host_module
from training.telemetry.state_files import ProbeReport, StateFileError, StopReport

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
    error is raised. A host that refuses connections is given DOWN_ATTEMPTS tries, not the budget."""
    delay = first_delay
    down = 0
    while True:
        try:
            return fn()
        except HostError as exc:
            down += exc.reason in DOWN_REASONS
            if exc.reason not in TRANSIENT_REASONS or down >= DOWN_ATTEMPTS or time.monotonic() + delay >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


@dataclass(frozen=True)
class StopVerdict:
    report: StopReport  # what the stop signalled
    verified: ProbeReport | None  # what was seen running afterwards (None: the run dir is not there)
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

    def _supervisor_call(self, flags: list[str], timeout: float,
                         absent: str = "echo '{\"absent\": true}'") -> object:
        """Run tfcluster's supervisor module with `flags` from the host's lib/ (one command, one interpreter:
        -S, the supervisor is stdlib only); the `absent` script when the run dir (or its lib/) is not here."""
        lib = shlex.quote(self.layout.lib)
        package = shlex.quote(os.path.join(self.layout.lib, HOST_PACKAGE))
        cmd = shell_command([self.host.python, "-S", "-m", host_module("supervisor"), *flags, "--run-dir",
                             self.layout.root])
        script = f"if [ -d {package} ]; then cd {lib} && exec {cmd}; else {absent}; fi"
        result = self.run_shell(script, timeout).check("remote", f"supervisor {flags[0]}")
        try:
            return json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise HostError(self.host.name, "remote", f"unreadable answer: {result.stdout[-200:]!r}") from exc

    def probe(self, timeout: float) -> ProbeReport:
        raw = self._supervisor_call(["--probe"], timeout)
        try:
            return ProbeReport.decode(raw)
        except StateFileError as exc:
            raise HostError(self.host.name, "remote", f"unreadable probe report: {exc}") from None

    def stop(self, grace: float, timeout: float, *, purge: bool = False) -> StopVerdict:
        """One command: `training.supervisor --stop --verify` (TERM, grace, KILL, then a fresh look at
        the host's processes) and, with `purge`, the run dir removed when nothing of the run is left."""
        flags = ["--stop", "--grace", str(grace), "--verify", *(["--purge"] if purge else [])]
        run_dir = shlex.quote(self.layout.root)
        remove = f"rm -rf -- {run_dir} && {{ rmdir -- {shlex.quote(os.path.dirname(self.layout.root))} 2>/dev/null; }}; " \
            if purge else ""
        try:
            raw = self._supervisor_call(flags, timeout + grace, absent=f"{remove}echo '{{\"absent\": true}}'")
        except CommandFailed:
            # The host's python does not run (moved, removed, broken): the same stop in /bin/sh.
            result = self.run_shell(sh_stop_script(self.layout.root, grace, purge), timeout + grace + 10)
            report, verified, purged = parse_sh_stop(self.host.name, result)
            return StopVerdict(report, verified, purged or (report.absent and purge))
        try:
            report = StopReport.decode(raw)
            data = raw if isinstance(raw, dict) else {}
            verified = ProbeReport.decode(data["verified"]) if "verified" in data else None
        except StateFileError as exc:
            raise HostError(self.host.name, "remote", f"unreadable stop report: {exc}") from None
        return StopVerdict(report, verified, bool(data.get("purged")) or (report.absent and purge))
