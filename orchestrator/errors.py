"""The project's own errors. Each renders as one line that names the file/key or the host.

The CLI turns any `TfclusterError` into that line on stderr and its `exit_code`, never a traceback.
`HostError.reason` is one word from `Reason`: scripts and the retry logic branch on it.
"""

from __future__ import annotations

from typing import Literal

Reason = Literal[
    # the machine or its sshd cannot be reached, or a working connection broke (worth a retry)
    "refused", "timeout", "unreachable", "lost",
    # the user must act
    "auth-failed", "hostkey-unknown", "hostkey-changed",
    # a step of a command on the host failed, or was cancelled
    "prepare", "ship", "launch", "supervisor", "task-failed", "remote", "purge", "port-taken",
    "command-failed", "cancelled", "error",
]


class TfclusterError(Exception):
    exit_code = 1

    def one_line(self) -> str:
        return str(self)


class ConfigError(TfclusterError):
    """Bad input in hosts.toml: names the file, the line when known, the key path, and a suggestion."""

    exit_code = 2

    def __init__(
        self, source: str, key: str | None, message: str, *, line: int | None = None, suggestion: str | None = None
    ) -> None:
        self.source = source
        self.key = key
        self.message = message
        self.line = line
        self.suggestion = suggestion
        super().__init__(self.one_line())

    def one_line(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        key = f" {self.key}:" if self.key else ""
        hint = f" (did you mean `{self.suggestion}`?)" if self.suggestion else ""
        return f"{where}:{key} {self.message}{hint}"


class UsageError(TfclusterError):
    """Bad command-line input (unknown run, unknown task...)."""

    exit_code = 2


class HostError(TfclusterError):
    """A fault on one host: unreachable, auth failed, host key unknown/changed, command failed."""

    exit_code = 1

    def __init__(self, host: str, reason: Reason, detail: str = "") -> None:
        self.host = host
        self.reason: Reason = reason
        self.detail = detail
        super().__init__(self.one_line())

    def one_line(self) -> str:
        return f"host {self.host}: {self.reason}" + (f": {self.detail}" if self.detail else "")

    def __reduce__(self) -> tuple[type[HostError], tuple[str, Reason, str]]:
        # Travels between processes when hosts are sharded (orchestrator.transport.shards).
        return (HostError, (self.host, self.reason, self.detail))


class CommandFailed(HostError):
    """A command ran on the host and exited non-zero (`CommandResult.check`, `run(check=True)`)."""

    def __init__(self, host: str, reason: Reason, detail: str, *, command: str, exit_code: int) -> None:
        super().__init__(host, reason, detail)
        self.command = command
        self.exit_code_remote = exit_code
