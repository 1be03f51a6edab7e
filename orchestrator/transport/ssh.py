"""`SSHTransport`: the Transport protocol over Paramiko (one connection per host, channels per command).

Paramiko and socket errors are turned into `HostError(host, reason, detail)` where they enter this
module; reasons: refused, timeout, unreachable, auth-failed, hostkey-unknown, hostkey-changed, lost,
sftp-failed. Host keys are checked against `known_hosts` under the policy: `yes` refuses an unknown
key, `accept-new` records it, `no` accepts it with a loud warning; a CHANGED key is refused always.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import posixpath
import select
import shlex
import socket
import stat
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence

import paramiko

from orchestrator.config.ssh_config import ResolvedSSH
from orchestrator.errors import HostError
from orchestrator.transport.base import CommandResult, ShellTransport, shell_command

log = logging.getLogger("tfcluster.ssh")
# Paramiko logs a traceback from its reader thread for every failed handshake; we report each failure
# once, as a HostError. Leave the level alone if the user configured it.
if logging.getLogger("paramiko").level == logging.NOTSET:
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)

_KNOWN_HOSTS_LOCK = threading.Lock()  # hosts connecting in parallel may append to one known_hosts
_READ_CHUNK = 65536


PID_MARKER = b"__tfcluster_pid__ "


def sh_wrap(command: str) -> str:
    """Run under /bin/sh whatever the user's login shell is (fish, csh...): quoting rules stay POSIX.

    The first stderr line reports the session's pid (sshd makes it a process-group leader), so a
    command that outlives its timeout can be killed with its children. It is stripped from stderr."""
    # The command runs in this same shell (no second `sh -c`): one process less per command.
    inner = f"echo \"{PID_MARKER.decode()}$$\" >&2\n{command}"
    return "/bin/sh -c " + shlex.quote(inner)


def split_pid_marker(err: bytes | bytearray) -> tuple[int | None, bytes]:
    """(pid, stderr without the marker line) once the marker line is complete, else (None, err)."""
    if err.startswith(PID_MARKER) and b"\n" in err:
        line, _, rest = bytes(err).partition(b"\n")
        value = line[len(PID_MARKER) :].strip()
        return (int(value) if value.isdigit() else None), rest
    return None, bytes(err)


_KNOWN_HOSTS_CACHE: dict[str, tuple[bytes, paramiko.HostKeys]] = {}
_IDENTITY_CACHE: dict[str, tuple[bytes, str | None, paramiko.PKey | None]] = {}


def _digest(path: str) -> bytes | None:
    """A digest of the file's bytes (None: unreadable). Reading is cheap, parsing is not; a digest,
    unlike mtime (coarse clock ticks), never misses a rewrite."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).digest()
    except OSError:
        return None


def _load_known_hosts(host: str, path: str) -> paramiko.HostKeys:
    """known_hosts parsed once per content, not once per host: a fan-out to hundreds of hosts would
    otherwise parse a user's long known_hosts hundreds of times. Callers only read the result."""
    digest = _digest(path) if os.path.exists(path) else b""
    with _KNOWN_HOSTS_LOCK:
        cached = _KNOWN_HOSTS_CACHE.get(path)
        if cached is not None and digest is not None and cached[0] == digest:
            return cached[1]
    keys = paramiko.HostKeys()
    if digest != b"":
        try:
            keys.load(path)
        except (OSError, UnicodeDecodeError) as exc:
            raise HostError(host, "hostkey-unknown", f"cannot read known_hosts {path}: {exc}") from exc
    if digest is not None:
        with _KNOWN_HOSTS_LOCK:
            _KNOWN_HOSTS_CACHE[path] = (digest, keys)
    return keys


def _append_known_host(path: str, name: str, key: paramiko.PKey) -> None:
    with _KNOWN_HOSTS_LOCK:
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a") as f:
            f.write(f"{name} {key.get_name()} {key.get_base64()}\n")


def _identity(path: str) -> tuple[str | None, paramiko.PKey | None]:
    """(why the key file cannot be used or None, the loaded key when it needs no passphrase), once
    per file content, like known_hosts: Paramiko would otherwise parse it again for every host."""
    if not os.path.exists(path):
        return f"identity file {path} does not exist", None
    digest = _digest(path)
    cached = _IDENTITY_CACHE.get(path)
    if cached is not None and cached[0] == digest:
        return cached[1], cached[2]
    problem, key = _load_identity(path)
    if digest is not None:
        _IDENTITY_CACHE[path] = (digest, problem, key)
    return problem, key


def _load_identity(path: str) -> tuple[str | None, paramiko.PKey | None]:
    """An encrypted key is fine here: the agent may hold it, and Paramiko reports it as an
    authentication failure otherwise."""
    try:
        return None, paramiko.PKey.from_path(path)
    except paramiko.PasswordRequiredException:
        return None, None
    except (paramiko.SSHException, OSError, ValueError, TypeError) as exc:
        if "password" in str(exc).lower():  # cryptography's way of saying "encrypted"
            return None, None
        reason = (str(exc).split(".")[0] or type(exc).__name__)[:120]
        return f"identity file {path} is not a usable private key ({reason})", None


def _auth_keys(paths: Sequence[str], keys: Sequence[paramiko.PKey | None]) -> tuple[paramiko.PKey | None, list[str] | None]:
    """(pkey, key_filename) for SSHClient.connect: the one identity file's already loaded key, unless a
    certificate sits next to it (Paramiko loads `<key>-cert.pub` only from a key_filename)."""
    if len(paths) == 1 and keys[0] is not None and not os.path.exists(f"{paths[0]}-cert.pub"):
        return keys[0], None
    return None, list(paths) or None


_TCP_QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux only


class _QuickAckSocket(socket.socket):
    """A TCP socket that acknowledges every segment at once (TCP_QUICKACK, re-armed before each read:
    Linux drops it again by itself).

    Why: sshd leaves Nagle on for sessions without a pty, and right after authentication it sends two
    small messages in a row (USERAUTH_SUCCESS, then the hostkeys-00@openssh.com notice). Our delayed
    ACK of the second one held sshd's answer to the first channel open for 40 ms, on every
    connection: measured 44 ms of a 50 ms first command on loopback."""

    @classmethod
    def wrap(cls, sock: socket.socket) -> socket.socket:
        if _TCP_QUICKACK is None:
            return sock
        timeout = sock.gettimeout()
        wrapped = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        wrapped.settimeout(timeout)
        return wrapped

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        with contextlib.suppress(OSError):
            self.setsockopt(socket.IPPROTO_TCP, _TCP_QUICKACK, 1)  # type: ignore[arg-type]
        return super().recv(bufsize, flags)


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Called by Paramiko only when known_hosts has no key of the offered type for the host."""

    def __init__(self, transport: SSHTransport, settings: ResolvedSSH, known: paramiko.HostKeys) -> None:
        self.transport = transport
        self.settings = settings
        self.known = known

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        s = self.settings
        fingerprint = key.fingerprint if hasattr(key, "fingerprint") else key.get_name()
        name = s.known_hosts_name
        if self.known.lookup(name):
            # known_hosts holds a key of another type for this host: treat it as a changed key.
            raise HostError(
                self.transport.host, "hostkey-changed",
                f"{name} offered a {key.get_name()} key ({fingerprint}) but {s.known_hosts} records a "
                "different key for it; if the machine was reinstalled, remove its line from known_hosts",
            )
        if s.policy == "accept-new":
            _append_known_host(s.known_hosts, name, key)
            log.info("host %s: new host key %s recorded in %s", self.transport.host, fingerprint, s.known_hosts)
            return
        if s.policy == "no":
            message = (
                f"HOST KEY NOT VERIFIED for host {self.transport.host} ({name}, {fingerprint}): "
                "strict_host_key_checking = \"no\" lets anyone on the network path impersonate it"
            )
            self.transport.warnings.append(message)
            log.warning(message)
            return
        raise HostError(
            self.transport.host, "hostkey-unknown",
            f"{name} is not in {s.known_hosts} (key {fingerprint}); add it (ssh-keyscan, or connect once "
            "with ssh) or set strict_host_key_checking = \"accept-new\"",
        )


class SSHTransport(ShellTransport):
    """One SSH connection to one host (through its ProxyJump chain), opened on first use."""

    def __init__(self, host: str, settings: ResolvedSSH) -> None:
        self.host = host
        self.settings = settings
        self.warnings: list[str] = []  # e.g. host key accepted unverified (policy "no")
        self._clients: list[paramiko.SSHClient] = []  # jump hosts first, the target last
        self._lock = threading.Lock()

    # --- connection --------------------------------------------------------------------------------
    def connect(self) -> None:
        with self._lock:
            if self._clients and self._active():
                return
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
        where = f"{s.hostname}:{s.port}"
        try:
            sock = socket.create_connection((s.hostname, s.port), timeout=s.connect_timeout)
        except ConnectionRefusedError as exc:
            raise HostError(self.host, "refused", f"{where}: connection refused (is sshd running?)") from exc
        except TimeoutError as exc:
            raise HostError(self.host, "timeout", f"{where}: no answer within {s.connect_timeout:g}s") from exc
        except socket.gaierror as exc:
            raise HostError(self.host, "unreachable", f"cannot resolve {s.hostname}: {exc.strerror}") from exc
        except OSError as exc:
            raise HostError(self.host, "unreachable", f"{where}: {exc.strerror or exc}") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _QuickAckSocket.wrap(sock)

    def _open_tunnel(self, jump: paramiko.SSHClient, target: ResolvedSSH, via: ResolvedSSH) -> paramiko.Channel:
        transport = jump.get_transport()
        where = f"{target.hostname}:{target.port} via {via.hostname}"
        if transport is None:
            raise HostError(self.host, "lost", f"jump host {via.hostname} closed the connection")
        try:
            return transport.open_channel(
                "direct-tcpip", (target.hostname, target.port), ("127.0.0.1", 0), timeout=target.connect_timeout
            )
        except paramiko.ChannelException as exc:
            reason = "refused" if exc.code == 2 else "unreachable"
            raise HostError(self.host, reason, f"{where}: {exc.text}") from exc
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise HostError(self.host, "timeout" if "timeout" in str(exc).lower() else "unreachable",
                            f"{where}: {exc}") from exc

    def _handshake(
        self, s: ResolvedSSH, sock: socket.socket | paramiko.Channel, *, via_jump: bool
    ) -> paramiko.SSHClient:
        where = f"{s.user}@{s.hostname}:{s.port}"
        identities = [_identity(path) for path in s.identity_files]
        for problem, _ in identities:
            if problem:
                sock.close()
                raise HostError(self.host, "auth-failed", problem)
        known = _load_known_hosts(self.host, s.known_hosts)
        client = paramiko.SSHClient()
        # Paramiko checks these keys itself (a mismatch raises BadHostKeyException) and asks the policy
        # only for unknown ones; nothing is ever saved by Paramiko itself.
        client._system_host_keys = known
        client.set_missing_host_key_policy(_HostKeyPolicy(self, s, known))
        started = time.monotonic()
        pkey, key_filename = _auth_keys(s.identity_files, [key for _, key in identities])
        try:
            client.connect(
                s.hostname, port=s.port, username=s.user, pkey=pkey, key_filename=key_filename,
                allow_agent=s.use_agent, look_for_keys=s.look_for_keys, sock=sock,  # type: ignore[arg-type]
                # `timeout` bounds the key exchange; it must outlast the banner wait, or Paramiko goes on
                # to authenticate on a dead transport ("No existing session") instead of timing out.
                timeout=s.connect_timeout * 1.5 + 1, banner_timeout=s.connect_timeout,
                auth_timeout=s.connect_timeout, channel_timeout=s.connect_timeout,
            )
        except HostError:
            client.close()
            raise
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise HostError(
                self.host, "hostkey-changed",
                f"{s.known_hosts_name} offered key {exc.key.fingerprint} but {s.known_hosts} records "
                f"{exc.expected_key.fingerprint}: refusing (possible man-in-the-middle; if the machine was "
                "reinstalled, remove its line from known_hosts)",
            ) from exc
        except paramiko.AuthenticationException as exc:
            client.close()
            keys = ", ".join(s.identity_files) or "default keys"
            agent = " and the agent" if s.use_agent else ""
            raise HostError(self.host, "auth-failed", f"{where}: tried {keys}{agent}: {exc}") from exc
        except TimeoutError as exc:
            client.close()
            raise HostError(self.host, "timeout", f"{where}: SSH handshake timed out") from exc
        except (paramiko.SSHException, EOFError, OSError) as exc:
            client.close()
            text = str(exc) or type(exc).__name__
            if "authentication methods available" in text:  # no key at all: no file, empty agent
                raise HostError(self.host, "auth-failed", f"{where}: no key to offer: {text}") from exc
            cause = exc.__cause__ or exc.__context__
            timed_out = (
                isinstance(cause, TimeoutError)
                or any(w in text.lower() for w in ("timeout", "timed out", "banner"))
                or time.monotonic() - started >= s.connect_timeout
            )
            reason = "timeout" if timed_out else "unreachable"
            raise HostError(self.host, reason, f"{where}: SSH handshake failed: {text}") from exc
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
        try:
            return self._transport().open_session(timeout=self.settings.connect_timeout)
        except HostError:
            raise
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise HostError(self.host, "lost", f"cannot open a session: {exc}") from exc

    # --- commands ----------------------------------------------------------------------------------
    # `run` (an argv) is ShellTransport.run: run_shell of the quoted command.
    def run_shell(self, command: str, *, timeout: float | None = None, stdin: bytes | None = None) -> CommandResult:
        """Run an already quoted POSIX shell command. On timeout the channel is closed (the remote
        command loses its stdio) and HostError(reason="timeout") is raised: never a hang."""
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        chan = self._session()
        out, err = bytearray(), bytearray()
        try:
            chan.exec_command(sh_wrap(command))
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
                _drain(chan, out, err)
                if chan.exit_status_ready() and chan.eof_received:
                    break
                if chan.closed or not self._active():
                    raise HostError(self.host, "lost", f"connection lost while running: {_short(command)}")
                if deadline is not None and time.monotonic() >= deadline:
                    self._kill_session(chan, _await_pid(chan, err, grace=self.settings.connect_timeout))
                    raise HostError(self.host, "timeout", f"command exceeded {timeout:g}s: {_short(command)}")
            _drain(chan, out, err)
            code = chan.recv_exit_status()
            err = bytearray(split_pid_marker(err)[1])
        except HostError:
            raise
        except TimeoutError as exc:
            raise HostError(self.host, "timeout", f"command exceeded {timeout}s: {_short(command)}") from exc
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise HostError(self.host, "lost", f"{exc or type(exc).__name__} while running: {_short(command)}") from exc
        finally:
            chan.close()
        return CommandResult(
            exit_code=code, stdout=out.decode("utf-8", "replace"), stderr=err.decode("utf-8", "replace"),
            duration_s=time.monotonic() - start,
        )

    def stream(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> SSHLineStream:
        chan = self._session()
        try:
            chan.exec_command(sh_wrap(shell_command(argv, env=env, cwd=cwd)))
            chan.shutdown_write()
        except (paramiko.SSHException, EOFError, OSError) as exc:
            chan.close()
            raise HostError(self.host, "lost", f"cannot start stream: {exc}") from exc
        return SSHLineStream(self, chan)

    def _kill_session(self, chan: paramiko.Channel, pid: int | None) -> None:
        """Kill a remote command's process group. The "signal" channel request is enough for non-root
        logins; sshd drops it for root (no post-auth privilege separation), hence the explicit kill."""
        send_signal(chan, "KILL")
        chan.close()
        if pid is None:
            return
        kill = f"kill -s KILL -- -{pid} 2>/dev/null || kill -s KILL {pid} 2>/dev/null; true"
        with contextlib.suppress(HostError):
            self.run_shell(kill, timeout=self.settings.connect_timeout)

    # --- files -------------------------------------------------------------------------------------
    def put_file(self, local_path: str, remote_path: str, mode: int | None = None) -> None:
        """Copy over SFTP to a temporary name, then rename: readers never see a half-written file.
        A leading `~/` means the remote home (SFTP paths are relative to it). Parents are created."""
        path = remote_path[2:] if remote_path.startswith("~/") else remote_path
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
        transport = self._transport()
        try:
            sftp = paramiko.SFTPClient.from_transport(transport)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise HostError(self.host, "lost", f"cannot open SFTP: {exc}") from exc
        if sftp is None:
            raise HostError(self.host, "sftp-failed", "the server refused the SFTP subsystem")
        try:
            _sftp_makedirs(sftp, posixpath.dirname(path))
            sftp.put(local_path, tmp)
            if mode is not None:
                sftp.chmod(tmp, mode)
            sftp.posix_rename(tmp, path)
        except FileNotFoundError as exc:
            raise HostError(self.host, "sftp-failed", f"{local_path} -> {remote_path}: {exc}") from exc
        except (OSError, paramiko.SSHException, EOFError) as exc:
            with contextlib.suppress(OSError, paramiko.SSHException, EOFError):
                sftp.remove(tmp)
            raise HostError(self.host, "sftp-failed", f"{local_path} -> {remote_path}: {exc}") from exc
        finally:
            sftp.close()

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


def _sftp_makedirs(sftp: paramiko.SFTPClient, path: str) -> None:
    if path in ("", ".", "/"):
        return
    try:
        if stat.S_ISDIR(sftp.stat(path).st_mode or 0):
            return
    except FileNotFoundError:
        pass
    _sftp_makedirs(sftp, posixpath.dirname(path))
    try:
        sftp.mkdir(path)
    except OSError:
        if not stat.S_ISDIR(sftp.stat(path).st_mode or 0):  # lost a race with another writer: fine
            raise


def _drain(chan: paramiko.Channel, out: bytearray, err: bytearray) -> None:
    """Append whatever stdout and stderr the channel holds now (without blocking) to out and err."""
    while chan.recv_ready():
        out += chan.recv(_READ_CHUNK)
    while chan.recv_stderr_ready():
        err += chan.recv_stderr(_READ_CHUNK)


def _await_pid(chan: paramiko.Channel, err: bytearray, grace: float) -> int | None:
    """The command's pid from its first stderr line, waiting up to `grace` s for it (a loaded host may
    not have started the command yet when its timeout expires: it must still be killed)."""
    give_up = time.monotonic() + grace
    while True:
        pid = split_pid_marker(err)[0]
        if pid is not None or chan.closed or time.monotonic() >= give_up:
            return pid
        select.select([chan], [], [], 0.05)
        while chan.recv_stderr_ready():
            err += chan.recv_stderr(_READ_CHUNK)
        while chan.recv_ready():
            chan.recv(_READ_CHUNK)  # drop: the result is an error anyway


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
    with contextlib.suppress(paramiko.SSHException, EOFError, OSError):
        chan.transport._send_user_message(msg)  # type: ignore[union-attr]


def _short(command: str, limit: int = 120) -> str:
    return command if len(command) <= limit else command[: limit - 3] + "..."


class SSHLineStream:
    """stdout of a long-running remote command, line by line; stderr is kept (last 64 KiB) not lost."""

    def __init__(self, transport: SSHTransport, chan: paramiko.Channel) -> None:
        self.host = transport.host
        self._transport = transport
        self._pid: int | None = None
        self._chan = chan
        self._closed_here = False
        self.stderr_tail = ""

    def lines(self) -> Iterator[str]:
        buf = bytearray()
        err = bytearray()
        chan = self._chan
        try:
            while True:
                if chan.eof_received:
                    chan.status_event.wait(1.0)
                else:
                    select.select([chan], [], [], 1.0)
                got = False
                while chan.recv_ready():
                    buf += chan.recv(_READ_CHUNK)
                    got = True
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(_READ_CHUNK)
                    if self._pid is None:
                        pid, stripped = split_pid_marker(err)
                        if pid is not None:
                            self._pid, err = pid, bytearray(stripped)
                    del err[:-65536]
                if got:
                    *complete, rest = buf.split(b"\n")
                    buf = bytearray(rest)
                    for line in complete:
                        yield line.decode("utf-8", "replace")
                if chan.closed or (chan.eof_received and chan.exit_status_ready()):
                    while chan.recv_ready():
                        buf += chan.recv(_READ_CHUNK)
                    for tail_line in bytes(buf).split(b"\n"):
                        if tail_line:
                            yield tail_line.decode("utf-8", "replace")
                    # A clean end sends EOF; a dead connection only closes the channel (exit status -1).
                    if not (chan.eof_received or self._closed_here):
                        raise HostError(self.host, "lost", "stream closed by the remote side")
                    return
                transport = chan.get_transport()
                if transport is None or not transport.is_active():
                    raise HostError(self.host, "lost", "connection lost while streaming")
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise HostError(self.host, "lost", f"stream failed: {exc}") from exc
        finally:
            self.stderr_tail = err.decode("utf-8", "replace")

    def close(self) -> None:
        """Stop reading and kill the remote command if it still runs (e.g. `tail -f`)."""
        self._closed_here = True
        if self._chan.exit_status_ready():
            self._chan.close()
            return
        pid = self._pid
        if pid is None:  # closed before lines() saw the marker: read it here
            pid = _await_pid(self._chan, bytearray(), grace=self._transport.settings.connect_timeout) or self._pid
        self._transport._kill_session(self._chan, pid)

    @property
    def exit_code(self) -> int | None:
        return self._chan.exit_status if self._chan.exit_status_ready() else None
