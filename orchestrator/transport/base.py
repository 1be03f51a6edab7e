"""The Transport contract: run a command on one host, move files, stream lines. One result type.

Implementations: `orchestrator.transport.ssh.SSHTransport` (Paramiko), `orchestrator.transport.openssh.
OpenSSHTransport` (the system's `ssh`, [ssh] client = "openssh"), `orchestrator.transport.local.LocalTransport`
(subprocess, for hosts with transport = "local") and `orchestrator.transport.srun.SrunTransport` (a Slurm job's
node); orchestrator.transport.factory builds them from one registry.
A command either runs to its end (`run`, `run_shell`), streams its stdout (`stream`), or holds a
conversation (`open_session`: stdin written and stdout read while it runs). Every command runs under
/bin/sh, or under the user's login shell first when the host says `login_shell` (`login_wrap`).
Commands are given as argv lists and shell-quoted exactly once, by `shell_command`; both implementations
get their argv `run` from `ShellTransport` and only say how they run a shell string (`_run_shell`).
A command that exits non-zero is a result, not an error, unless the caller asks `check=True` (or calls
`result.check(...)`): then it is `CommandFailed`, a HostError naming the host, the step and stderr.
"""

from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from orchestrator.errors import CommandFailed, Reason

DETAIL_CHARS = 300  # of stderr (or stdout) in a CommandFailed line


@dataclass(frozen=True)
class CommandResult:
    host: str
    command: str
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def check(self, reason: Reason = "command-failed", what: str = "") -> CommandResult:
        """Self when the command exited 0, else CommandFailed: "<what>: <the end of stderr>"."""
        if self.ok:
            return self
        tail = (self.stderr.strip() or self.stdout.strip())[-DETAIL_CHARS:]
        what = what or f"`{short(self.command)}` exited with {self.exit_code}"
        raise CommandFailed(self.host, reason, f"{what}: {tail}" if tail else what,
                            command=self.command, exit_code=self.exit_code)


def short(command: str, limit: int = 120) -> str:
    return command if len(command) <= limit else command[: limit - 3] + "..."


def shell_command(argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: str | None = None) -> str:
    """The one place an argv becomes a remote shell string: every value is quoted.

    A leading `~/` in cwd or in the program (argv[0], e.g. `python = "~/venv/bin/python"`) is expanded
    by the remote shell ("$HOME"/...), the rest stays quoted."""
    parts: list[str] = []
    if cwd is not None:
        parts.append(f"cd {remote_path(cwd)} &&")
    if env:
        parts.append("env " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()))
    if argv:
        parts.append(" ".join([remote_path(argv[0]), *(shlex.quote(a) for a in argv[1:])]))
    return " ".join(parts)


def remote_path(path: str) -> str:
    """Quote a remote path for the shell, letting a leading ~ mean the remote user's home."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def login_wrap(command: str) -> str:
    """`command` (POSIX) run by the user's login shell first (`$SHELL -l`: /etc/profile, ~/.profile or
    ~/.bash_profile, as for `module load` or conda), then by /bin/sh ([remote] login_shell = true)."""
    inner = "exec /bin/sh -c " + shlex.quote(command)
    return 'exec "${SHELL:-/bin/sh}" -l -c ' + shlex.quote(inner)


class Session(Protocol):
    """A remote command the caller talks to while it runs: bytes to its stdin, its stdout line by line.
    `start` holds one per host for its whole conversation (prepare, ship, the barrier, launch, readiness):
    one command, so one login shell, whatever the number of exchanges."""

    host: str

    def send(self, data: bytes) -> None:
        """Write to the command's stdin; HostError("lost") if the connection is gone."""
        ...

    def read_line(self, timeout: float) -> str | None:
        """The next stdout line (without its newline); None once stdout has ended; HostError("timeout")
        when no line came within `timeout` seconds, HostError("lost") when the connection broke."""
        ...

    def close_input(self) -> None:
        """End the command's stdin (it reads end-of-file and may clean up before it exits)."""
        ...

    def close(self) -> None:
        """End the conversation; a command still running is killed with its process group."""
        ...

    @property
    def exit_code(self) -> int | None: ...

    @property
    def stderr_tail(self) -> str: ...


class LineStream(Protocol):
    """A long-running remote command whose stdout is read line by line (agent, `logs -f`)."""

    def lines(self) -> Iterator[str]: ...

    def close(self) -> None: ...

    @property
    def exit_code(self) -> int | None: ...


class Transport(Protocol):
    host: str  # the host's name from hosts.toml, used in every error

    def run(
        self, argv: Sequence[str], *, timeout: float | None = None, stdin: bytes | None = None,
        env: Mapping[str, str] | None = None, cwd: str | None = None, check: bool = False,
    ) -> CommandResult: ...

    def run_shell(
        self, command: str, *, timeout: float | None = None, stdin: bytes | None = None, check: bool = False,
    ) -> CommandResult:
        """Run a POSIX shell script as given (the caller quoted every value in it)."""
        ...

    def stream(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> LineStream: ...

    def open_session(self, command: str) -> Session:
        """Start a POSIX shell script (the caller quoted every value in it) and talk to it (see Session)."""
        ...

    def close(self) -> None: ...


class ShellTransport(ABC):
    """A transport that runs POSIX shell strings: its argv `run` is `run_shell` of `shell_command(argv)`,
    so every implementation quotes an argv the same way."""

    host: str

    @abstractmethod
    def _run_shell(self, command: str, timeout: float | None, stdin: bytes | None) -> CommandResult:
        """Run an already quoted POSIX shell command; on timeout raise HostError(reason="timeout"), never hang."""

    def run_shell(
        self, command: str, *, timeout: float | None = None, stdin: bytes | None = None, check: bool = False,
    ) -> CommandResult:
        result = self._run_shell(command, timeout, stdin)
        return result.check() if check else result

    def run(
        self, argv: Sequence[str], *, timeout: float | None = None, stdin: bytes | None = None,
        env: Mapping[str, str] | None = None, cwd: str | None = None, check: bool = False,
    ) -> CommandResult:
        return self.run_shell(shell_command(argv, env=env, cwd=cwd), timeout=timeout, stdin=stdin, check=check)
