"""The pieces of a Paramiko SSH session below SSHTransport (the POSIX wrapper and pid marker every command
runs in are orchestrator.transport.shell_wrap, shared with the OpenSSH client): non-blocking reads, the RFC 4254
"signal" request, a TCP_QUICKACK socket that remembers a reset, `SSHLineStream` (stdout of a long-running command) and
`SSHSession` (a command the caller writes to and reads from while it runs).
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import paramiko

from orchestrator.errors import HostError
from orchestrator.transport.shell_wrap import split_pid_marker
from orchestrator.transport.ssh_faults import SSH_FAULTS

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

READ_CHUNK = 65536
SEND_SLICE = 32768  # OpenSSH's channel packet size: what one send() can move at most


_TCP_QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux only


class QuickAckSocket(socket.socket):
    """A TCP socket that acknowledges every segment at once (TCP_QUICKACK, re-armed before each read:
    Linux drops it again by itself).

    Why: sshd leaves Nagle on for sessions without a pty, and right after authentication it sends two
    small messages in a row (USERAUTH_SUCCESS, then the hostkeys-00@openssh.com notice). Our delayed
    ACK of the second one held sshd's answer to the first channel open for 40 ms, on every
    connection: measured 44 ms of a 50 ms first command on loopback."""

    @classmethod
    def wrap(cls, sock: socket.socket) -> socket.socket:
        timeout = sock.gettimeout()
        wrapped = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        wrapped.settimeout(timeout)
        return wrapped

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        if _TCP_QUICKACK is not None:
            with contextlib.suppress(OSError):
                self.setsockopt(socket.IPPROTO_TCP, _TCP_QUICKACK, 1)
        return super().recv(bufsize, flags)


class ClientSocket(QuickAckSocket):
    """The socket of a connection to sshd (acknowledging at once, above) that remembers, for the error when
    the handshake fails, whether the server sent any byte and whether it reset the connection. Paramiko
    cannot tell: a reset met while it sends its banner is a bare EOFError, one met while it reads the
    server's banner is "Error reading SSH protocol banner", as is a host that never speaks."""

    heard = False  # the server sent something (its banner, at least)
    reset = False  # a send or a receive met ECONNRESET or EPIPE (EPIPE: the reset came first)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        try:
            data = super().recv(bufsize, flags)
        except (ConnectionResetError, BrokenPipeError):
            self.reset = True
            raise
        if data and not self.heard:
            self.heard = True
        return data

    def send(self, data: ReadableBuffer, flags: int = 0) -> int:
        try:
            return super().send(data, flags)
        except (ConnectionResetError, BrokenPipeError):
            self.reset = True
            raise


def drain(chan: paramiko.Channel, out: bytearray, err: bytearray) -> None:
    """Append whatever stdout and stderr the channel holds now (without blocking) to out and err."""
    while chan.recv_ready():
        out += chan.recv(READ_CHUNK)
    while chan.recv_stderr_ready():
        err += chan.recv_stderr(READ_CHUNK)


def await_pid(chan: paramiko.Channel, err: bytearray, grace: float) -> int | None:
    """The command's pid from its first stderr line, waiting up to `grace` s for it (a loaded host may
    not have started the command yet when its timeout expires: it must still be killed)."""
    give_up = time.monotonic() + grace
    while True:
        pid = split_pid_marker(err)[0]
        if pid is not None or chan.closed or time.monotonic() >= give_up:
            return pid
        select.select([chan], [], [], 0.05)
        while chan.recv_stderr_ready():
            err += chan.recv_stderr(READ_CHUNK)
        while chan.recv_ready():
            chan.recv(READ_CHUNK)  # drop: the result is an error anyway


def send_signal(chan: paramiko.Channel, name: str) -> None:
    """RFC 4254 "signal" request: OpenSSH's sshd (>= 7.9) delivers it to the session's process group,
    so a command that outlives its timeout is killed, not merely cut off from its output."""
    if chan.closed or chan.exit_status_ready():
        return
    msg = paramiko.Message()
    msg.add_byte(paramiko.common.cMSG_CHANNEL_REQUEST)
    msg.add_int(chan.remote_chanid)
    msg.add_string("signal")
    msg.add_boolean(False)
    msg.add_string(name)
    with contextlib.suppress(*SSH_FAULTS):
        chan.transport._send_user_message(msg)  # type: ignore[union-attr]


class SSHLineStream:
    """stdout of a long-running remote command, line by line; stderr is kept (last 64 KiB) not lost.

    Two ways to read it: `lines()` blocks for the next lines; `read_available()` never blocks, for one
    thread that reads many streams in turn (the collector's StreamPump)."""

    def __init__(self, host: str, chan: paramiko.Channel, kill: Callable[[paramiko.Channel, int | None], None],
                 grace: float) -> None:
        self.host = host
        self._kill = kill  # the transport's: kills the remote command's process group
        self._grace = grace  # how long to wait for the pid marker of a command closed early
        self._pid: int | None = None
        self._chan = chan
        self._closed_here = False
        self._out = bytearray()  # stdout after the last complete line
        self._err = bytearray()  # stderr without the pid marker, its last 64 KiB

    @property
    def stderr_tail(self) -> str:
        return self._err.decode("utf-8", "replace")

    def lines(self) -> Iterator[str]:
        chan = self._chan
        while True:
            try:
                if chan.eof_received:
                    chan.status_event.wait(1.0)
                else:
                    select.select([chan], [], [], 1.0)
            except SSH_FAULTS as exc:
                raise HostError(self.host, "lost", f"stream failed: {exc}") from exc
            got, ended = self.read_available()
            yield from got
            if ended:
                return

    def read_available(self) -> tuple[list[str], bool]:
        """The complete lines that arrived since the last read (without blocking), and whether the command
        has ended (then its last, unterminated line is included). A dead connection raises
        HostError("lost"); a command closed here ends cleanly."""
        chan, buf, err = self._chan, self._out, self._err
        try:
            got = False
            while chan.recv_ready():
                buf += chan.recv(READ_CHUNK)
                got = True
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(READ_CHUNK)
                if self._pid is None:
                    pid, stripped = split_pid_marker(err)
                    if pid is not None:
                        self._pid = pid
                        err[:] = stripped
                del err[:-65536]
            lines: list[str] = []
            if got:
                *complete, rest = buf.split(b"\n")
                buf[:] = rest
                lines = [line.decode("utf-8", "replace") for line in complete]
            if chan.closed or (chan.eof_received and chan.exit_status_ready()):
                while chan.recv_ready():
                    buf += chan.recv(READ_CHUNK)
                lines += [tail.decode("utf-8", "replace") for tail in bytes(buf).split(b"\n") if tail]
                buf.clear()
                # A clean end sends EOF; a dead connection only closes the channel (exit status -1).
                if not (chan.eof_received or self._closed_here):
                    raise HostError(self.host, "lost", "stream closed by the remote side")
                return lines, True
            transport = chan.get_transport()
            if transport is None or not transport.is_active():
                raise HostError(self.host, "lost", "connection lost while streaming")
            return lines, False
        except SSH_FAULTS as exc:
            raise HostError(self.host, "lost", f"stream failed: {exc}") from exc

    def close(self) -> None:
        """Stop reading and kill the remote command if it still runs (e.g. `tail -f`)."""
        self._closed_here = True
        if self._chan.exit_status_ready():
            self._chan.close()
            return
        pid = self._pid
        if pid is None:  # closed before lines() saw the marker: read it here
            pid = await_pid(self._chan, bytearray(), grace=self._grace) or self._pid
        self._kill(self._chan, pid)

    @property
    def exit_code(self) -> int | None:
        return self._chan.exit_status if self._chan.exit_status_ready() else None


class SSHSession:
    """A command whose stdin stays open (base.Session): `send` writes to it, `read_line` reads its stdout."""

    def __init__(self, host: str, chan: paramiko.Channel, kill: Callable[[paramiko.Channel, int | None], None],
                 grace: float) -> None:
        self.host = host
        self._chan = chan
        self._kill = kill
        self._grace = grace
        self._out = bytearray()
        self._err = bytearray()
        self._pid: int | None = None

    def send(self, data: bytes) -> None:
        """All of `data`, a packet's worth at a time: Paramiko's `sendall` copies the unsent rest for every
        packet, which is quadratic in the size of what is sent."""
        view = memoryview(data)
        try:
            while view:
                sent = self._chan.send(view[:SEND_SLICE].tobytes())
                if sent <= 0:
                    raise OSError("the channel is closed")
                view = view[sent:]
        except SSH_FAULTS as exc:
            raise HostError(self.host, "lost", f"cannot write to the command: {exc or type(exc).__name__}") from exc

    def close_input(self) -> None:
        with contextlib.suppress(*SSH_FAULTS):
            self._chan.shutdown_write()

    def _drain(self) -> None:
        drain(self._chan, self._out, self._err)
        if self._pid is None:
            pid, rest = split_pid_marker(self._err)
            if pid is not None:
                self._pid, self._err = pid, bytearray(rest)
        del self._err[:-65536]

    def read_line(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        chan = self._chan
        try:
            while True:
                newline = self._out.find(b"\n")
                if newline >= 0:
                    line = bytes(self._out[:newline])
                    del self._out[: newline + 1]
                    return line.decode("utf-8", "replace")
                if chan.recv_ready():  # what it said before it ended comes first, even once it is closed
                    self._drain()
                    continue
                if chan.eof_received:
                    rest, self._out = bytes(self._out), bytearray()
                    if not rest:
                        chan.status_event.wait(self._grace)  # its output has ended: its exit status is due
                        self._drain()
                    return rest.decode("utf-8", "replace") if rest else None
                if chan.closed:
                    raise HostError(self.host, "lost", "the connection closed while the command ran")
                transport = chan.get_transport()
                if transport is None or not transport.is_active():
                    raise HostError(self.host, "lost", "connection lost while the command ran")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise HostError(self.host, "timeout", f"no answer within {timeout:g}s")
                select.select([chan], [], [], min(left, 1.0))
                self._drain()
        except SSH_FAULTS as exc:
            raise HostError(self.host, "lost", f"{exc or type(exc).__name__} while the command ran") from exc

    def close(self) -> None:
        if self._chan.exit_status_ready() or self._chan.closed:
            self._chan.close()
            return
        if self._pid is None:
            self._pid = await_pid(self._chan, self._err, grace=min(self._grace, 1.0))
        self._kill(self._chan, self._pid)

    @property
    def exit_code(self) -> int | None:
        return self._chan.exit_status if self._chan.exit_status_ready() else None

    @property
    def stderr_tail(self) -> str:
        with contextlib.suppress(*SSH_FAULTS):
            self._drain()
        return self._err.decode("utf-8", "replace")
