"""`OpenSSHTransport`: the Transport protocol on the system's `ssh` client (hosts with client = "openssh").

Every command tfcluster sends the host is one `ssh` process (orchestrator.transport.openssh_args says how
hosts.toml's keys become its options; the user's ssh config is ssh's own to read). Commands run under
/bin/sh whatever the login shell, report their pid first (shell_wrap.sh_wrap), and are killed with their
children on the host when they outlive their timeout or are closed, as on the Paramiko path. With
ControlPersist > 0 (the default) the first use opens one shared connection per host
(orchestrator.transport.openssh_master) and every command after it is a channel of that connection,
also in later tfcluster commands while the master lives. ssh's failures become the Paramiko path's
HostError reasons, with ssh's own message (orchestrator.transport.openssh_faults).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence

from orchestrator.config.schema import SSHOptions
from orchestrator.errors import HostError
from orchestrator.transport.base import CommandResult, ShellTransport, shell_command, short
from orchestrator.transport.connect_policy import (
    CONNECT_ATTEMPTS,
    RETRY_PAUSE_S,
    ConnectFailed,
    worth_another_try,
)
from orchestrator.transport.openssh_args import Destination, command_args, control_dir, destination
from orchestrator.transport.openssh_faults import SSH_FAILED, connect_error, lost_connection, lost_error
from orchestrator.transport.openssh_master import close_master, master_alive, open_master
from orchestrator.transport.openssh_streams import OpenSSHLineStream, OpenSSHSession, find_pid_marker
from orchestrator.transport.shell_wrap import kill_script, new_session_tag, sh_wrap

PID_WAIT_STEP_S = 0.05


class OpenSSHTransport(ShellTransport):
    """One host reached by the system's `ssh`; its shared connection opened on first use."""

    def __init__(self, host: str, address: str, explicit: SSHOptions, *, login_shell: bool = False,
                 what: str = "address") -> None:
        self.host = host
        self.address = address
        self.explicit = explicit  # hosts.toml's [ssh] keys for this host: the rest is ssh's config
        self.login_shell = login_shell
        self.what = what  # the hosts.toml key `address` came from, for a bad-input error
        self.warnings: list[str] = []
        self.interactive = False  # the master may prompt on the terminal (`check` at a terminal)
        self.reused: bool | None = None  # after connect(): whether a live shared connection was found
        self._dest: Destination | None = None
        self._ready = False
        self._lock = threading.Lock()

    # --- connection --------------------------------------------------------------------------------
    def destination(self) -> Destination:
        if self._dest is None:
            self._dest = destination(self.address, self.explicit, what=self.what)
        return self._dest

    def connect(self) -> None:
        """Make sure the shared connection is up (once per transport): reuse a live one, else open it,
        with the one more try connect_policy allows; a failure is ConnectFailed."""
        with self._lock:
            if self._ready:
                return
            dest = self.destination()
            if dest.persist_s > 0:
                self.reused = master_alive(dest)
                if not self.reused:
                    self._open_master(dest)
            self._ready = True

    def _open_master(self, dest: Destination) -> None:
        for attempt in range(1, CONNECT_ATTEMPTS + 1):
            try:
                open_master(self.host, dest, interactive=self.interactive)
                return
            except HostError as exc:
                if attempt == CONNECT_ATTEMPTS or not worth_another_try(exc):
                    raise ConnectFailed(exc.host, exc.reason, exc.detail) from exc
            time.sleep(RETRY_PAUSE_S)

    def close_shared(self, *, end_sessions: bool = True) -> bool:
        """Close this host's shared connection (`check --close`; `stop` lets the commands still running
        through it end first: openssh_master.close_master); whether one was open."""
        with self._lock:
            self._ready = False
            return close_master(self.destination(), end_sessions=end_sessions)

    def _argv(self, remote: str) -> list[str]:
        dest = self.destination()
        return [*dest.argv(*command_args(()), control_dir=control_dir() if dest.persist_s > 0 else None), remote]

    def _popen(self, remote: str, stdin: int) -> subprocess.Popen[bytes]:
        self.connect()
        try:
            # Its own session: a Ctrl-C at the terminal reaches tfcluster, which ends its commands itself.
            return subprocess.Popen(self._argv(remote), stdin=stdin, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise HostError(self.host, "unreachable", f"cannot run ssh: {exc.strerror or exc}") from exc

    # --- commands ----------------------------------------------------------------------------------
    def _run_shell(self, command: str, timeout: float | None, stdin: bytes | None) -> CommandResult:
        for attempt in range(1, CONNECT_ATTEMPTS + 1):
            try:
                return self._run_once(command, timeout, stdin)
            except ConnectFailed as exc:  # the command never started: trying again is safe
                if attempt == CONNECT_ATTEMPTS or not worth_another_try(exc):
                    raise
            time.sleep(RETRY_PAUSE_S)
        raise AssertionError("unreachable")  # (the loop returns or raises)

    def _run_once(self, command: str, timeout: float | None, stdin: bytes | None) -> CommandResult:
        start = time.monotonic()
        tag = new_session_tag()
        proc = self._popen(sh_wrap(command, self.login_shell, tag), subprocess.PIPE)
        try:
            out, err = proc.communicate(input=stdin or b"", timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            pid = self._await_pid(proc, exc.stderr or b"")
            _end(proc)
            self._kill(pid, tag)
            raise HostError(self.host, "timeout", f"command exceeded {timeout:g}s: {short(command)}") from exc
        except BaseException:
            _end(proc)
            raise
        pid, rest = find_pid_marker(err)
        text = err.decode("utf-8", "replace")
        if proc.returncode == SSH_FAILED and pid is None:  # ssh failed before the command started
            error = connect_error(self.host, self.address, text)
            raise ConnectFailed(error.host, error.reason, error.detail)
        if proc.returncode == SSH_FAILED and self._gone(text):
            raise lost_error(self.host, text, f"while running: {short(command)}")
        return CommandResult(host=self.host, command=command, exit_code=proc.returncode,
                             stdout=out.decode("utf-8", "replace"), stderr=rest.decode("utf-8", "replace"),
                             duration_s=time.monotonic() - start)

    def _await_pid(self, proc: subprocess.Popen[bytes], err: bytes) -> int | None:
        """The timed-out command's pid, waiting up to the connect timeout for it (a loaded host may not
        have started the command yet: it must still be killed)."""
        give_up = time.monotonic() + self.destination().connect_timeout
        pid = find_pid_marker(err)[0]
        while pid is None and time.monotonic() < give_up and proc.poll() is None:
            try:
                _, err = proc.communicate(timeout=PID_WAIT_STEP_S)
            except subprocess.TimeoutExpired as exc:
                err = exc.stderr or b""
            pid = find_pid_marker(err or b"")[0]
        return pid

    def _gone(self, stderr: str) -> bool:
        """Whether a command's ssh, exiting 255 after the command started, lost its connection (rather
        than relaying the command's own 255): ssh said so, or the shared connection it ran in is gone (a
        client of a master that died exits 255 without a word)."""
        dest = self.destination()
        if lost_connection(stderr):
            return True
        if dest.persist_s > 0 and not master_alive(dest):
            self._ready = False  # the next command opens a new one
            return True
        return False

    def _kill(self, pid: int | None, tag: str) -> None:
        """Kill a remote command's process group (ending the local ssh only cuts it off its output)."""
        if pid is None:
            return
        with contextlib.suppress(HostError):
            self.run_shell(kill_script(pid, tag), timeout=self.destination().connect_timeout)

    def stream(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> OpenSSHLineStream:
        tag = new_session_tag()
        proc = self._popen(sh_wrap(shell_command(argv, env=env, cwd=cwd), self.login_shell, tag), subprocess.DEVNULL)
        return OpenSSHLineStream(self.host, proc, lambda pid: self._kill(pid, tag), self._gone,
                                 self.destination().connect_timeout)

    def open_session(self, command: str) -> OpenSSHSession:
        tag = new_session_tag()
        proc = self._popen(sh_wrap(command, self.login_shell, tag), subprocess.PIPE)
        return OpenSSHSession(self.host, proc, lambda pid: self._kill(pid, tag), self._gone,
                              self.destination().connect_timeout)

    def close(self) -> None:
        """Nothing to close here: the shared connection outlives this process by ControlPersist."""

    def __enter__(self) -> OpenSSHTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Kill the local ssh (its own process group) and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
        proc.communicate(timeout=5)
