"""The one place Paramiko and socket errors become the project's `HostError(host, reason, detail)`.

Reasons (errors.Reason): refused (nothing listens, or the host resets the connection), timeout, unreachable
(the machine or its sshd cannot be reached),
auth-failed, hostkey-unknown, hostkey-changed (the user must act), lost (a working connection broke).
Everything in orchestrator.transport that talks to Paramiko maps its failures here.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from typing import Protocol

import paramiko

from orchestrator.config.ssh_config import ResolvedSSH
from orchestrator.errors import HostError, Reason

# What Paramiko raises when a connection or a channel breaks under it.
SSH_FAULTS = (paramiko.SSHException, EOFError, OSError)


@contextlib.contextmanager
def mapped(host: str, reason: Reason, what: str) -> Iterator[None]:
    """Run the block; a Paramiko or socket fault becomes HostError(host, reason, "<what>: <fault>")."""
    try:
        yield
    except HostError:
        raise
    except SSH_FAULTS as exc:
        raise HostError(host, reason, f"{what}: {exc or type(exc).__name__}") from exc


def dial_error(host: str, s: ResolvedSSH, exc: OSError) -> HostError:
    """The TCP connection to sshd failed."""
    where = f"{s.hostname}:{s.port}"
    if isinstance(exc, ConnectionRefusedError):
        return HostError(host, "refused", f"{where}: connection refused (is sshd running?)")
    if isinstance(exc, ConnectionResetError):  # accepted, then reset at once: as handshake_error says it
        return HostError(host, "refused", f"{where}: the connection was reset before the SSH banner")
    if isinstance(exc, TimeoutError):
        return HostError(host, "timeout", f"{where}: no answer within {s.connect_timeout:g}s")
    if isinstance(exc, socket.gaierror):
        return HostError(host, "unreachable", f"cannot resolve {s.hostname}: {exc.strerror}{s.paramiko_hint()}")
    return HostError(host, "unreachable", f"{where}: {exc.strerror or exc}")


def tunnel_error(host: str, target: ResolvedSSH, via: ResolvedSSH, exc: BaseException) -> HostError:
    """A jump host could not open the direct-tcpip channel to the next hop."""
    where = f"{target.hostname}:{target.port} via {via.hostname}"
    if isinstance(exc, paramiko.ChannelException):
        return HostError(host, "refused" if exc.code == 2 else "unreachable", f"{where}: {exc.text}")
    return HostError(host, "timeout" if "timeout" in str(exc).lower() else "unreachable", f"{where}: {exc}")


class PeerSocket(Protocol):
    """What the connection's socket saw (ssh_channel.ClientSocket): whether the server sent any byte, and
    whether it reset the connection."""

    heard: bool
    reset: bool


def handshake_error(host: str, s: ResolvedSSH, exc: BaseException, started: float,
                    peer: PeerSocket | None = None) -> HostError:
    """Key exchange, host key check or authentication failed (`started`: time.monotonic() at start;
    `peer`: the socket, when it was dialled here rather than tunnelled through a jump host)."""
    where = f"{s.user}@{s.hostname}:{s.port}"
    if isinstance(exc, HostError):
        return exc
    if isinstance(exc, paramiko.BadHostKeyException):
        return HostError(
            host, "hostkey-changed",
            f"{s.known_hosts_name} offered key {exc.key.fingerprint} but {s.known_hosts} records "
            f"{exc.expected_key.fingerprint}: refusing (possible man-in-the-middle; if the machine was "
            "reinstalled, remove its line from known_hosts)",
        )
    if isinstance(exc, paramiko.AuthenticationException):
        keys = ", ".join(s.identity_files) or "default keys"
        agent = " and the agent" if s.use_agent else ""
        return HostError(host, "auth-failed", f"{where}: tried {keys}{agent}: {exc}{s.paramiko_hint()}")
    if isinstance(exc, TimeoutError):
        return HostError(host, "timeout", f"{where}: SSH handshake timed out")
    when = "during the SSH handshake" if peer is not None and peer.heard else "before the SSH banner"
    if peer is not None and peer.reset:  # the host accepted, then refused us: trying again will not change it
        return HostError(host, "refused", f"{where}: the connection was reset {when}")
    text = str(exc) or type(exc).__name__
    if peer is not None and not peer.heard and _closed(exc):  # e.g. sshd's MaxStartups, under load
        return HostError(host, "unreachable", f"{where}: the connection was closed {when}")
    if "authentication methods available" in text:  # no key at all: no file, empty agent
        return HostError(host, "auth-failed", f"{where}: no key to offer: {text}{s.paramiko_hint()}")
    cause = exc.__cause__ or exc.__context__
    timed_out = (
        isinstance(cause, TimeoutError)
        or any(w in text.lower() for w in ("timeout", "timed out", "banner"))
        or time.monotonic() - started >= s.connect_timeout
    )
    if timed_out and peer is not None and not peer.heard:  # TCP accepted, then silence: a hung sshd, or not sshd
        return HostError(host, "timeout", f"{where}: accepted the connection but sent no SSH banner "
                         f"within {s.connect_timeout:g}s")
    return HostError(host, "timeout" if timed_out else "unreachable", f"{where}: SSH handshake failed: {text}")


def _closed(exc: BaseException) -> bool:
    """The connection ended (an EOF), as opposed to timing out: in exc or what it was raised from."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, EOFError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
