"""A CLI command in a real pseudo-terminal, read as a terminal reads it: tests wait for what its screen
shows (ANSI escapes stripped), never for a fixed time. The screen is read while the test waits, also while
the command quits: a pty nobody reads fills up and the command's writer then blocks on its last frames."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from tests.helpers.waiting import wait_for

ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]")
READ_SLICE_S = 0.2  # how long one read waits for output: the pacing of every wait below


class Terminal:
    """`argv` on a new pty of `columns` x `lines` (TERM=xterm-256color), its own session and process group."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, columns: int = 120, lines: int = 40) -> None:
        self.master, slave = pty.openpty()
        os.set_blocking(self.master, False)
        env = {**env, "TERM": "xterm-256color", "COLUMNS": str(columns), "LINES": str(lines)}
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
                                     start_new_session=True, close_fds=True)
        os.close(slave)
        self.screen = b""
        self.closed = False  # the command's side of the pty is closed: nothing more to read

    def read(self, wait: float = READ_SLICE_S) -> None:
        """What the command wrote since the last read, waiting up to `wait` for the first byte."""
        if self.closed or not select.select([self.master], [], [], wait)[0]:
            return
        try:
            while chunk := os.read(self.master, 65536):
                self.screen += chunk
        except BlockingIOError:
            return
        except OSError:  # EIO: every process holding the other side has exited
            self.closed = True

    def text(self, tail: int = 200_000) -> str:
        return ANSI.sub(b"", self.screen[-tail:]).decode("utf-8", "replace")

    def write(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def wait_until_shown(self, shown: Callable[[str], bool], timeout: float, what: str) -> str:
        """The screen's text once `shown(text)` holds; fails at once if the command exits before."""
        def on_screen() -> str | None:
            self.read()
            text = self.text()
            if shown(text):
                return text
            assert self.proc.poll() is None, f"exited ({self.proc.returncode}) before {what}:\n{text[-3000:]}"
            return None

        found: str = wait_for(on_screen, timeout, what, interval=0, explain=lambda: self.text()[-3000:])
        return found

    def wait_exit(self, timeout: float) -> int:
        """The command's exit code, reading its screen while it quits and then to the end."""
        wait_for(lambda: self.read() or self.proc.poll() is not None, timeout, "the command to exit", interval=0,
                 explain=lambda: self.text()[-3000:])
        while not self.closed and select.select([self.master], [], [], 0)[0]:
            self.read(0)
        return self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        os.close(self.master)

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
