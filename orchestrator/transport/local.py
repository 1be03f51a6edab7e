"""`LocalTransport`: the Transport protocol on subprocess, for hosts with `transport = "local"`.

Commands go through `/bin/sh -c shell_command(...)` exactly as over SSH, so `~`, `$HOME`, `env` and
quoting behave the same on a local host and a remote one (with `login_shell`, under `$SHELL -l` first,
as over SSH). A command that exceeds its timeout has its whole process group killed and raises
HostError(reason="timeout").
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence

from orchestrator.errors import HostError
from orchestrator.transport.base import CommandResult, ShellTransport, login_wrap, shell_command

_SH = "/bin/sh"


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


class LocalTransport(ShellTransport):
    def __init__(self, host: str, *, login_shell: bool = False) -> None:
        self.host = host
        self.login_shell = login_shell

    def _argv(self, command: str) -> list[str]:
        return [_SH, "-c", login_wrap(command) if self.login_shell else command]

    def _run_shell(self, command: str, timeout: float | None, stdin: bytes | None) -> CommandResult:
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                self._argv(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group: a timeout kills the command and its children
            )
        except OSError as exc:
            raise HostError(self.host, "unreachable", f"cannot start {_SH}: {exc}") from exc
        try:
            out, err = proc.communicate(input=stdin or b"", timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            _kill_group(proc)
            proc.communicate()
            raise HostError(self.host, "timeout", f"command exceeded {timeout:g}s: {command[:120]}") from exc
        except BaseException:
            _kill_group(proc)
            proc.wait()
            raise
        return CommandResult(
            host=self.host, command=command, exit_code=proc.returncode, stdout=out.decode("utf-8", "replace"), stderr=err.decode("utf-8", "replace"),
            duration_s=time.monotonic() - start,
        )

    def stream(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> LocalLineStream:
        proc = subprocess.Popen(
            self._argv(shell_command(argv, env=env, cwd=cwd)), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )
        return LocalLineStream(proc)

    def open_session(self, command: str) -> LocalSession:
        try:
            proc = subprocess.Popen(self._argv(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise HostError(self.host, "unreachable", f"cannot start {_SH}: {exc}") from exc
        return LocalSession(self.host, proc)

    def close(self) -> None:
        pass


class LocalLineStream:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        self.stderr_tail = ""
        # Drain stderr in the background so a chatty command never blocks on a full pipe.
        self._stderr_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._stderr_thread.start()

    def _drain_stderr(self) -> None:
        stderr = self._proc.stderr
        assert stderr is not None
        try:
            for chunk in iter(lambda: os.read(stderr.fileno(), 4096), b""):
                self.stderr_tail = (self.stderr_tail + chunk.decode("utf-8", "replace"))[-65536:]
        except (OSError, ValueError):
            pass  # closed by close()

    def lines(self) -> Iterator[str]:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            yield raw.decode("utf-8", "replace").rstrip("\n")
        self._proc.wait()

    def close(self) -> None:
        if self._proc.poll() is None:
            _kill_group(self._proc)
        self._proc.wait()
        for pipe in (self._proc.stdout, self._proc.stderr):
            if pipe is not None:
                pipe.close()

    @property
    def exit_code(self) -> int | None:
        return self._proc.poll()


class LocalSession(LocalLineStream):
    """A command whose stdin stays open (base.Session), on subprocess pipes."""

    def __init__(self, host: str, proc: subprocess.Popen[bytes]) -> None:
        super().__init__(proc)
        self.host = host
        self._buf = bytearray()
        self._eof = False

    def send(self, data: bytes) -> None:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise HostError(self.host, "lost", f"the command closed its input: {exc}") from exc

    def close_input(self) -> None:
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()

    def read_line(self, timeout: float) -> str | None:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while True:
            newline = self._buf.find(b"\n")
            if newline >= 0:
                line = bytes(self._buf[:newline])
                del self._buf[: newline + 1]
                return line.decode("utf-8", "replace")
            if self._eof:
                rest, self._buf = bytes(self._buf), bytearray()
                if not rest:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self._proc.wait(timeout=5)  # its output has ended: its exit code is due
                return rest.decode("utf-8", "replace") if rest else None
            left = deadline - time.monotonic()
            if left <= 0:
                raise HostError(self.host, "timeout", f"no answer within {timeout:g}s")
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 65536)
                self._buf += chunk
                self._eof = not chunk

    def close(self) -> None:
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        super().close()
