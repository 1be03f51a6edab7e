"""Connections that outlive one tfcluster command (an SSH client that shares them: client = "openssh"):
open them interactively, once per host, and close them.

`open_interactively` (`tfcluster check` at a terminal) opens each host's shared connection in turn, with
the terminal available for a password or a second factor; every later command reuses it without asking
(BatchMode) while it lives. `close_shared` (`tfcluster stop`, `check --close`) closes them (`stop` lets
the commands still running through one, another run's stream, end first). Hosts whose
client shares nothing (Paramiko, local, Slurm) are skipped. A transport shares connections when it is a
`SharingTransport` (orchestrator.transport.openssh.OpenSSHTransport is).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from orchestrator.config.kinds import transport_kind
from orchestrator.errors import HostError, TfclusterError
from orchestrator.plan.model import HostPlan
from orchestrator.transport.factory import Opener, transport_for

SHARING_KINDS = ("openssh",)  # registry keys (orchestrator.config.kinds) whose transports share connections


@runtime_checkable
class SharingTransport(Protocol):
    interactive: bool  # connect() may prompt on the terminal
    reused: bool | None  # after connect(): whether a live shared connection was found

    def connect(self) -> None: ...

    def close_shared(self, *, end_sessions: bool = True) -> bool: ...


@dataclass(frozen=True)
class Opened:
    host: str
    reused: bool  # a live shared connection was there already
    error: HostError | None = None


def sharing_hosts(hosts: Sequence[HostPlan]) -> list[HostPlan]:
    return [h for h in hosts if transport_kind(h.transport, h.ssh.client) in SHARING_KINDS]


def open_interactively(hosts: Sequence[HostPlan], opener: Opener = transport_for,
                       on_opened: Callable[[Opened], None] | None = None) -> list[Opened]:
    """Open (or find) each sharing host's connection, one host at a time: a prompt on the terminal is
    for one host only."""
    out: list[Opened] = []
    for host in sharing_hosts(hosts):
        transport = opener(host)
        if not isinstance(transport, SharingTransport):
            continue
        transport.interactive = True
        try:
            transport.connect()
            row = Opened(host.name, bool(transport.reused))
        except HostError as exc:
            row = Opened(host.name, False, exc)
        out.append(row)
        if on_opened is not None:
            on_opened(row)
    return out


def close_shared(hosts: Sequence[HostPlan], opener: Opener = transport_for, *, end_sessions: bool = True) -> list[str]:
    """Close each sharing host's shared connection; the names of the hosts that had one open.
    `end_sessions=False`: each closes once the commands running through it (another run's) have ended."""
    closed: list[str] = []
    for host in sharing_hosts(hosts):
        transport = opener(host)
        try:
            if isinstance(transport, SharingTransport) and transport.close_shared(end_sessions=end_sessions):
                closed.append(host.name)
        except TfclusterError:
            continue  # e.g. its ssh config file is gone since: then no command of ours has a master either
    return closed
