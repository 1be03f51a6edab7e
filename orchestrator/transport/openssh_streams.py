"""A long-running command (`OpenSSHLineStream`) and a conversation (`OpenSSHSession`) carried by a local
`ssh` process: the local transport's pipes (orchestrator.transport.local) plus what a remote command adds.

The remote command reports its pid first on stderr (shell_wrap.sh_wrap); the stderr reader strips that
line and keeps the rest (its last 64 KiB). Closing a command that still runs kills it on the host (its
process group, through `kill`, another ssh command), then the local ssh. An ssh that ends with 255
because the connection broke (`gone`: the transport's judgement) raises HostError("lost"), unless
closed here; one that ends with 255 before the command started is a connect error.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Iterator

from orchestrator.errors import HostError
from orchestrator.transport.local import LocalLineStream, LocalSession
from orchestrator.transport.openssh_faults import SSH_FAILED, connect_error, lost_error
from orchestrator.transport.shell_wrap import PID_MARKER

STDERR_KEEP = 65536
Kill = Callable[[int | None], None]  # kills the remote command by its pid (None: not known)
Gone = Callable[[str], bool]  # whether ssh's exit 255 (with this stderr) was the connection breaking


def find_pid_marker(err: bytes) -> tuple[int | None, bytes]:
    """(pid, stderr without the marker line) once the marker line is complete, else (None, err). ssh's
    own messages (a host key warning) may come before the remote command's first line."""
    if err.startswith(PID_MARKER):
        at = 0
    else:
        line_start = err.find(b"\n" + PID_MARKER)
        if line_start < 0:
            return None, err
        at = line_start + 1
    end = err.find(b"\n", at)
    if end < 0:
        return None, err
    value = err[at + len(PID_MARKER) : end].strip()
    return (int(value) if value.isdigit() else None), err[:at] + err[end + 1 :]


class _RemoteCommand:
    """What both classes add to the local pipes: the pid marker, the remote kill, "lost"."""

    _proc: subprocess.Popen[bytes]
    stderr_tail: str

    def _remote_init(self, host: str, kill: Kill, gone: Gone, grace: float) -> None:
        self.host = host
        self._kill_remote = kill
        self._gone = gone
        self._grace = grace  # how long a command closed early may take to report its pid
        self._pid: int | None = None
        self._pid_known = threading.Event()
        self._closed_here = False

    def _drain_stderr(self) -> None:
        stderr = self._proc.stderr
        assert stderr is not None
        raw = b""
        try:
            for chunk in iter(lambda: os.read(stderr.fileno(), 4096), b""):
                raw += chunk
                if self._pid is None and not self._pid_known.is_set():
                    pid, rest = find_pid_marker(raw)
                    if pid is not None:
                        self._pid, raw = pid, rest
                        self._pid_known.set()
                raw = raw[-STDERR_KEEP:]
                self.stderr_tail = raw.decode("utf-8", "replace")
        except (OSError, ValueError):
            pass  # closed by close()
        finally:
            self._pid_known.set()  # no pid will come

    def _check_lost(self, what: str) -> None:
        if self._closed_here or self._proc.poll() != SSH_FAILED:
            return
        self._pid_known.wait(self._grace)  # the stderr reader has seen all of ssh's words
        if self._pid is None:  # the command never started: ssh could not connect
            raise connect_error(self.host, "ssh", self.stderr_tail)
        if self._gone(self.stderr_tail):
            raise lost_error(self.host, self.stderr_tail, what)

    def _close_remote(self) -> None:
        self._closed_here = True
        if self._proc.poll() is None:
            self._pid_known.wait(self._grace)
            self._kill_remote(self._pid)


class OpenSSHLineStream(_RemoteCommand, LocalLineStream):
    def __init__(self, host: str, proc: subprocess.Popen[bytes], kill: Kill, gone: Gone, grace: float) -> None:
        self._remote_init(host, kill, gone, grace)
        super().__init__(proc)

    def lines(self) -> Iterator[str]:
        yield from super().lines()
        self._check_lost("while streaming")

    def close(self) -> None:
        self._close_remote()
        super().close()


class OpenSSHSession(_RemoteCommand, LocalSession):
    def __init__(self, host: str, proc: subprocess.Popen[bytes], kill: Kill, gone: Gone, grace: float) -> None:
        self._remote_init(host, kill, gone, grace)
        super().__init__(host, proc)

    def read_line(self, timeout: float) -> str | None:
        line = super().read_line(timeout)
        if line is None:
            self._check_lost("while the command ran")
        return line

    def send(self, data: bytes) -> None:
        try:
            super().send(data)
        except HostError:
            self._check_lost("while sending to the command")
            raise

    def close(self) -> None:
        self._close_remote()
        super().close()
