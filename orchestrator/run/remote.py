"""Per-host remote operations of a run (probe, stop, purge, launch), each one round trip, with retries.

The work on the host is done by `training.supervisor --probe/--stop`, shipped with the run's code, so
a probe or a stop is one command whatever the number of tasks.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from typing import TypeVar

from orchestrator.errors import HostError, Reason
from orchestrator.plan.model import HostPlan
from orchestrator.transport.base import CommandResult, Transport, shell_command
from orchestrator.transport.factory import Opener, transport_for
from training.layout import RUN_DIR_ENV, RunLayout
from training.telemetry.state_files import (
    ProbeReport,
    StateFileError,
    StopReport,
    SupervisorStateFile,
    TaskStateFile,
    decode_state_line,
)

StateFiles = list[TaskStateFile | SupervisorStateFile]

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

    def _supervisor_call(self, flags: list[str], timeout: float) -> object:
        """Run `training.supervisor <flags>` from the run's code dir; {"absent": true} when the run dir
        (or its code) is not on this host."""
        code = shlex.quote(self.layout.code)
        cmd = shell_command([self.host.python, "-m", "training.supervisor", *flags, "--run-dir", self.layout.root])
        script = f"if [ -d {code}/training ]; then cd {code} && exec {cmd}; else echo '{{\"absent\": true}}'; fi"
        result = self.run_shell(script, timeout).check("remote", f"training.supervisor {flags[0]}")
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

    def _states_script(self, pid_var: str) -> str:
        state = shlex.quote(self.layout.state)
        return (f"for f in {state}/*.json; do [ -f \"$f\" ] && cat \"$f\"; done; "
                f"kill -0 {pid_var} 2>/dev/null && echo ALIVE; true")

    @staticmethod
    def _parse_states(stdout: str) -> tuple[StateFiles, bool]:
        states: StateFiles = []
        lines = stdout.splitlines()
        for line in lines:
            if line.startswith("{"):
                try:
                    states.append(decode_state_line(json.loads(line)))
                except (ValueError, StateFileError):
                    continue  # a file caught half-written by an old writer, or not ours
        return states, "ALIVE" in lines

    def read_states(self, supervisor_pid: int | None, timeout: float) -> tuple[StateFiles, bool]:
        """The run's state files (each one JSON line) and whether the supervisor pid still lives: a
        shell one-liner, much cheaper than a Python probe while `start` polls many hosts."""
        script = self._states_script(str(int(supervisor_pid or 0)))
        result = self.run_shell(script, timeout)
        return self._parse_states(result.stdout)

    def stop(self, grace: float, timeout: float) -> StopReport:
        raw = self._supervisor_call(["--stop", "--grace", str(grace)], timeout + grace)
        try:
            return StopReport.decode(raw)
        except StateFileError as exc:
            raise HostError(self.host.name, "remote", f"unreadable stop report: {exc}") from None

    def purge(self, timeout: float) -> None:
        self.run_shell(shell_command(["rm", "-rf", "--", self.layout.root]), timeout).check(
            "purge", f"cannot remove {self.layout.root}")

    def launch_supervisor(self, timeout: float) -> tuple[int | None, StateFiles, bool]:
        """Start the host's supervisor detached and wait on the host until it has spawned its tasks
        (`training.supervisor --detach`: its own session, stdio away from the SSH channel, readiness
        through a pipe, no polling); return (its pid, the state files, alive). One round trip, one
        interpreter start. Idempotent: a retry after a lost connection reports the supervisor the
        first attempt started instead of starting a second."""
        root = self.layout.root
        # The run marker is set by the shell (`VAR=value exec`): in the environment the supervisor is
        # exec'd with, so /proc/<pid>/environ carries it without a second interpreter start.
        # -S: the supervisor is stdlib only; skipping site-packages makes it start faster.
        launch = shell_command([
            self.host.python, "-S", "-m", "training.supervisor", "--detach", "--run-dir", root,
            "--host", self.host.name, "--ready-timeout", f"{max(1.0, min(timeout - 1.0, 20.0)):g}"])
        script = (f"cd {shlex.quote(self.layout.code)} || exit 1\n"
                  f"{RUN_DIR_ENV}={shlex.quote(root)} exec {launch}")
        result = self.run_shell(script, timeout).check("launch", "the supervisor did not start")
        pid = next((int(line.split()[1]) for line in result.stdout.splitlines()
                    if line.startswith("PID ") and line.split()[1].isdigit()), None)
        states, alive = self._parse_states(result.stdout)
        return pid, states, alive
