"""`SSHTransport`: the Transport protocol over Paramiko (one connection per host, channels per command).

Connections go through the host's ProxyJump chain, with one more try where it can help
(orchestrator.transport.connect_policy); the client socket acknowledges at once and remembers a reset
(ssh_channel.ClientSocket); host keys and identities are checked by orchestrator.transport.ssh_keys;
every Paramiko or socket failure becomes a HostError in orchestrator.transport.ssh_faults. A command
runs under /bin/sh whatever the login shell (shell_wrap.sh_wrap; under `$SHELL -l` first with
`login_shell`) and is killed with its children when it outlives its timeout. `open_session` keeps a
command's stdin open for a conversation (ssh_channel.SSHSession: start's one command per host).
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import paramiko

from orchestrator.config.ssh_config import ResolvedSSH
from orchestrator.errors import HostError
from orchestrator.transport.base import CommandResult, Session, ShellTransport, shell_command, short
from orchestrator.transport.connect_policy import (
    CONNECT_ATTEMPTS,
    RETRY_PAUSE_S,
    ConnectFailed,
    worth_another_try,
)
from orchestrator.transport.shell_wrap import kill_script, new_session_tag, sh_wrap, split_pid_marker
from orchestrator.transport.ssh_channel import (
    ClientSocket,
    SSHLineStream,
    SSHSession,
    await_pid,
    drain,
    send_signal,
)
from orchestrator.transport.ssh_faults import SSH_FAULTS, dial_error, handshake_error, mapped, tunnel_error
from orchestrator.transport.ssh_keys import HostKeyPolicy, auth_keys, identity, load_known_hosts
from orchestrator.transport.ssh_wire import StreamingTransport

# Paramiko logs a traceback from its reader thread for every failed handshake; we report each failure
# once, as a HostError. Leave the level alone if the user configured it.
if logging.getLogger("paramiko").level == logging.NOTSET:
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)


class SSHTransport(ShellTransport):
    """One SSH connection to one host (through its ProxyJump chain), opened on first use."""

    def __init__(self, host: str, settings: ResolvedSSH, *, login_shell: bool = False) -> None:
        self.host = host
        self.settings = settings
        self.login_shell = login_shell  # [remote] login_shell: commands under `$SHELL -l`, then /bin/sh
        self.warnings: list[str] = []  # e.g. host key accepted unverified (policy "no")
        self._clients: list[paramiko.SSHClient] = []  # jump hosts first, the target last
        self._lock = threading.Lock()

    # --- connection --------------------------------------------------------------------------------
    def connect(self) -> None:
        """Connect (once: a live connection is kept), retrying where connect_policy says another try can
        help; a failure is ConnectFailed, which callers do not retry."""
        with self._lock:
            if self._clients and self._active():
                return
            for attempt in range(1, CONNECT_ATTEMPTS + 1):
                try:
                    self._connect_once()
                    return
                except HostError as exc:
                    if attempt == CONNECT_ATTEMPTS or not worth_another_try(exc):
                        raise ConnectFailed(exc.host, exc.reason, exc.detail) from exc
                time.sleep(RETRY_PAUSE_S)

    def _connect_once(self) -> None:
        self._close_clients()
        try:
            sock: paramiko.Channel | socket.socket | None = None
            hops = [*self.settings.proxy_jump, self.settings]
            for i, hop in enumerate(hops):
                if sock is None:
                    sock = self._dial(hop)
                client = self._handshake(hop, sock, via_jump=i > 0)
                self._clients.append(client)
                if i + 1 < len(hops):
                    sock = self._open_tunnel(client, hops[i + 1], hop)
        except BaseException:
            self._close_clients()
            raise

    def _active(self) -> bool:
        t = self._clients[-1].get_transport() if self._clients else None
        return t is not None and t.is_active()

    def _dial(self, s: ResolvedSSH) -> socket.socket:
        try:
            sock = socket.create_connection((s.hostname, s.port), timeout=s.connect_timeout)
        except OSError as exc:
            raise dial_error(self.host, s, exc) from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return ClientSocket.wrap(sock)

    def _open_tunnel(self, jump: paramiko.SSHClient, target: ResolvedSSH, via: ResolvedSSH) -> paramiko.Channel:
        transport = jump.get_transport()
        if transport is None:
            raise HostError(self.host, "lost", f"jump host {via.hostname} closed the connection")
        try:
            return transport.open_channel(
                "direct-tcpip", (target.hostname, target.port), ("127.0.0.1", 0), timeout=target.connect_timeout
            )
        except (paramiko.ChannelException, *SSH_FAULTS) as exc:
            raise tunnel_error(self.host, target, via, exc) from exc

    def _handshake(
        self, s: ResolvedSSH, sock: socket.socket | paramiko.Channel, *, via_jump: bool
    ) -> paramiko.SSHClient:
        identities = [identity(path) for path in s.identity_files]
        for problem, _ in identities:
            if problem:
                sock.close()
                raise HostError(self.host, "auth-failed", problem)
        known = load_known_hosts(self.host, s.known_hosts)
        client = paramiko.SSHClient()
        # Paramiko checks these keys itself (a mismatch raises BadHostKeyException) and asks the policy
        # only for unknown ones; nothing is ever saved by Paramiko itself.
        client._system_host_keys = known  # type: ignore[attr-defined]  # (a private attribute, stable since 1.x)
        client.set_missing_host_key_policy(HostKeyPolicy(self.host, s, known, self.warnings))
        started = time.monotonic()
        pkey, key_filename = auth_keys(s.identity_files, [key for _, key in identities])
        try:
            # Two arguments the stubs type differently across their versions: a list of key files is
            # accepted (older stubs say str), and StreamingTransport (AES-GCM first, a calmer reader
            # thread: ssh_wire.py) is a Transport (older stubs' Transport lacks gss_kex).
            untyped: dict[str, Any] = {"key_filename": key_filename, "transport_factory": StreamingTransport}
            client.connect(
                s.hostname, port=s.port, username=s.user, pkey=pkey,
                allow_agent=s.use_agent, look_for_keys=s.look_for_keys, sock=sock,
                # `timeout` bounds the key exchange; it must outlast the banner wait, or Paramiko goes on
                # to authenticate on a dead transport ("No existing session") instead of timing out.
                timeout=s.connect_timeout * 1.5 + 1, banner_timeout=s.connect_timeout,
                auth_timeout=s.connect_timeout, channel_timeout=s.connect_timeout,
                **untyped,
            )
        except (HostError, paramiko.BadHostKeyException, paramiko.AuthenticationException, TimeoutError,
                *SSH_FAULTS) as exc:
            client.close()
            error = handshake_error(self.host, s, exc, started, sock if isinstance(sock, ClientSocket) else None)
            if error is exc:
                raise
            raise error from exc
        transport = client.get_transport()
        if transport is not None and s.keepalive:
            transport.set_keepalive(s.keepalive)
        return client

    def _transport(self) -> paramiko.Transport:
        self.connect()
        t = self._clients[-1].get_transport()
        if t is None or not t.is_active():
            raise HostError(self.host, "lost", "connection closed")
        return t

    def _session(self) -> paramiko.Channel:
        transport = self._transport()
        with mapped(self.host, "lost", "cannot open a session"):
            session = transport.open_session(timeout=self.settings.connect_timeout)
        return session

    # --- commands ----------------------------------------------------------------------------------
    # `run` (an argv) is ShellTransport.run: run_shell of the quoted command.
    def _run_shell(self, command: str, timeout: float | None, stdin: bytes | None) -> CommandResult:
        """Run an already quoted POSIX shell command. On timeout the channel is closed (the remote
        command loses its stdio) and HostError(reason="timeout") is raised: never a hang."""
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        chan = self._session()
        out, err = bytearray(), bytearray()
        tag = new_session_tag()
        try:
            chan.exec_command(sh_wrap(command, self.login_shell, tag))
            if stdin:
                chan.settimeout(timeout)
                chan.sendall(stdin)
                chan.settimeout(None)
            chan.shutdown_write()
            while True:
                wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
                if chan.eof_received:
                    chan.status_event.wait(wait)
                else:
                    select.select([chan], [], [], wait)
                drain(chan, out, err)
                if chan.exit_status_ready() and chan.eof_received:
                    break
                if chan.closed or not self._active():
                    raise HostError(self.host, "lost", f"connection lost while running: {short(command)}")
                if deadline is not None and time.monotonic() >= deadline:
                    self._kill_session(chan, await_pid(chan, err, grace=self.settings.connect_timeout), tag)
                    raise HostError(self.host, "timeout", f"command exceeded {timeout:g}s: {short(command)}")
            drain(chan, out, err)
            code = chan.recv_exit_status()
            err = bytearray(split_pid_marker(err)[1])
        except HostError:
            raise
        except TimeoutError as exc:
            raise HostError(self.host, "timeout", f"command exceeded {timeout}s: {short(command)}") from exc
        except SSH_FAULTS as exc:
            raise HostError(self.host, "lost", f"{exc or type(exc).__name__} while running: {short(command)}") from exc
        finally:
            chan.close()
        return CommandResult(
            host=self.host, command=command, exit_code=code, stdout=out.decode("utf-8", "replace"), stderr=err.decode("utf-8", "replace"),
            duration_s=time.monotonic() - start,
        )

    def stream(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> SSHLineStream:
        chan = self._session()
        tag = new_session_tag()
        try:
            with mapped(self.host, "lost", "cannot start stream"):
                chan.exec_command(sh_wrap(shell_command(argv, env=env, cwd=cwd), self.login_shell, tag))
                chan.shutdown_write()
        except HostError:
            chan.close()
            raise
        return SSHLineStream(self.host, chan, lambda c, pid: self._kill_session(c, pid, tag),
                             self.settings.connect_timeout)

    def open_session(self, command: str) -> Session:
        chan = self._session()
        tag = new_session_tag()
        try:
            with mapped(self.host, "lost", "cannot start the command"):
                chan.exec_command(sh_wrap(command, self.login_shell, tag))
        except HostError:
            chan.close()
            raise
        return SSHSession(self.host, chan, lambda c, pid: self._kill_session(c, pid, tag), self.settings.connect_timeout)

    def _kill_session(self, chan: paramiko.Channel, pid: int | None, tag: str) -> None:
        """Kill a remote command's process group. The "signal" channel request is enough for non-root
        logins; sshd drops it for root (no post-auth privilege separation), hence the explicit kill."""
        send_signal(chan, "KILL")
        chan.close()
        if pid is None:
            return
        with contextlib.suppress(HostError):
            self.run_shell(kill_script(pid, tag), timeout=self.settings.connect_timeout)

    def close(self) -> None:
        with self._lock:
            self._close_clients()

    def _close_clients(self) -> None:
        for client in reversed(self._clients):  # target first, then the jump hosts under it
            client.close()
        self._clients = []

    def __enter__(self) -> SSHTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
