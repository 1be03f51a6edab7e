"""Spawning and reaping a task program: `spawn` (posix_spawnp, stdio on the task's log, signals back at
their defaults), `Child` (the part of subprocess.Popen the supervisor needs), `Task` (one planned task's
life on this host: state, restarts, exits). No subprocess, dataclasses or typing at run time: the
supervisor starts on every host at every `start`.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

    from .policy import RestartBudget


# Signals the supervisor (or Python) ignores, which a spawned program would otherwise inherit ignored.
_RESET_SIGNALS = (signal.SIGHUP, signal.SIGPIPE, signal.SIGXFSZ)


def spawn(argv: list[str], env: dict[str, str], log_path: str, nice: int = 0) -> int:
    """Start a task program (PATH lookup), stdin from /dev/null, stdout and stderr appended to its
    log, in the supervisor's process group and working directory, `nice` steps below our priority.
    OSError when it cannot be run."""
    # `~/` as in hosts.toml's `python = "~/venv/bin/python"`: the remote home, as everywhere else.
    program = os.path.expanduser(argv[0]) if argv[0].startswith("~/") else argv[0]
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)  # close-on-exec by default
    try:
        pid = os.posix_spawnp(program, [program, *argv[1:]], env, file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, fd, 1),
            (os.POSIX_SPAWN_DUP2, fd, 2),
        ], setsigdef=_RESET_SIGNALS)
    finally:
        os.close(fd)
    if nice:
        # posix_spawn has no niceness of its own. Set now, before the program (just exec'd) starts its
        # threads: Linux keeps a niceness per thread, and new threads and children inherit it.
        with contextlib.suppress(OSError):  # it may already have ended
            os.setpriority(os.PRIO_PROCESS, pid, os.getpriority(os.PRIO_PROCESS, 0) + nice)
    return pid


class Child:
    """A spawned process: the part of subprocess.Popen the supervisor needs (returncode < 0: signal)."""

    __slots__ = ("pid", "returncode")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def _reaped(self, flags: int) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:  # reaped elsewhere: its status is lost
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid != 0:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        return self._reaped(os.WNOHANG)

    def wait(self) -> int:
        code = self._reaped(0)
        assert code is not None
        return code


class Task:
    __slots__ = (
        "budget",
        "command",
        "env",
        "epoch",
        "error",
        "exit_code",
        "exit_signal",
        "exited_at",
        "final",
        "history",
        "index",
        "job",
        "next_start",
        "port",
        "proc",
        "restart_reason",
        "restarts",
        "started_at",
        "state",
        "stopped_by",
    )

    def __init__(self, job: str, index: int, command: list[str], env: dict[str, str], port: int | None,
                 budget: RestartBudget) -> None:
        self.job = job
        self.index = index
        self.command = command
        self.env = env
        self.port = port  # its TF server's port, checked free before each start
        self.budget = budget
        self.proc: Child | None = None
        self.state = "starting"
        self.restarts = 0  # every restart of this task, for display (the budget may have been reset)
        self.restart_reason: str | None = None  # "failure" | "group"
        self.epoch = 0  # the group-restart epoch it was started in (multi-worker-mirrored)
        self.exit_code: int | None = None
        self.exit_signal: int | None = None
        self.error: str | None = None  # why it could not run at all (e.g. its port is taken)
        # None, or who ended it for good: "user" (a hold file), "run" (the run's outcome), "stop".
        self.stopped_by: str | None = None
        self.final = False  # done (exit 0), or failed or stopped for good: never started again
        self.next_start = 0.0
        self.started_at: float | None = None
        self.exited_at: float | None = None
        self.history: list[dict[str, Any]] = []

    @property
    def name(self) -> str:
        """`job-index`: file names, state keys, the task marker and the peers' messages."""
        return f"{self.job}-{self.index}"

    @property
    def label(self) -> str:
        """`job:index`, as users read it (notes in its log); `name` is the storage form."""
        return f"{self.job}:{self.index}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None
