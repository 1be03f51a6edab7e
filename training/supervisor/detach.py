"""`--detach`: the launcher `start` runs on every host. It forks the supervisor into its own session
(stdio on its log, away from the SSH channel), waits on a pipe until every task was spawned, prints
`PID <pid>`, the state files and `ALIVE`, and exits: one process and one round trip per host, no
polling. A per-host flock makes it idempotent: a launch retried after a lost connection reports the
supervisor the first attempt started instead of starting a second.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

from training.layout import RunLayout
from training.supervisor.core import Supervisor
from training.supervisor.files import read_json
from training.supervisor.procfs import proc_pgid


def _lock(layout: RunLayout, host: str) -> int | None:
    """An fd holding this host's supervisor lock for the run, or None when a live supervisor holds it.
    flock locks die with their last holder, so a crashed supervisor never blocks a new one."""
    import fcntl

    fd = os.open(os.path.join(layout.state, f"supervisor-{host}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _redirect_stdio(log_path: str) -> None:
    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)


def _wait_ready(fd: int, timeout: float) -> None:
    """Until the supervisor wrote "ready" or closed its end (it exited first), at most `timeout` s."""
    import select

    select.select([fd], [], [], max(0.0, timeout))


def _existing_supervisor(layout: RunLayout, host: str, timeout: float) -> int | None:
    """The pid of the supervisor that holds the lock, once its state file says it is past starting."""
    deadline = time.monotonic() + timeout
    while True:
        data = read_json(layout.supervisor_state_file(host)) or {}
        pid = data.get("pid")
        if isinstance(pid, int) and data.get("state") != "starting":
            return pid
        if time.monotonic() >= deadline:
            return pid if isinstance(pid, int) else None
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    return proc_pgid(pid) is not None


def detach(run_dir: str, host: str, ready_timeout: float) -> int:
    """Fork the supervisor into its own session, wait until it has spawned its tasks, report (see the
    module docstring). Returns the launcher's exit code: 0 when a supervisor was started or found."""
    layout = RunLayout(run_dir)
    for d in layout.dirs():
        os.makedirs(d, exist_ok=True)
    lock = _lock(layout, host)
    if lock is None:  # this run's supervisor already runs here (a retried launch): report that one
        pid = _existing_supervisor(layout, host, ready_timeout)
    else:
        read_end, write_end = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the supervisor: it keeps the lock fd (inherited) for as long as it lives
            code = 1
            try:
                os.close(read_end)
                os.setsid()
                _redirect_stdio(os.path.join(layout.logs, f"supervisor-{host}.log"))
                code = Supervisor(run_dir, host, ready_fd=write_end).serve()
            except BaseException:
                import traceback

                traceback.print_exc()  # to the supervisor's log
            finally:
                os._exit(code)  # never return into the launcher's code (or run its exit handlers)
        os.close(write_end)
        os.close(lock)
        _wait_ready(read_end, ready_timeout)
        os.close(read_end)
    lines = [f"PID {pid}"] if pid is not None else []
    if os.path.isdir(layout.state):
        for name in sorted(os.listdir(layout.state)):
            if name.endswith(".json"):
                with contextlib.suppress(OSError), open(os.path.join(layout.state, name), encoding="utf-8") as f:
                    lines.append(f.read().strip())
    if pid is not None and _alive(pid):
        lines.append("ALIVE")
    print("\n".join(lines), flush=True)
    return 0 if pid is not None else 1
