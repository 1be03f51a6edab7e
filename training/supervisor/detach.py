"""`--detach`: the launcher `start` runs on every host (exec'd by training/launcher.py, in the same SSH
command that prepared the run). It forks the supervisor into its own session (stdio on its log, away
from the SSH channel) and prints, as they happen:

    PID <pid>            at once, so `stop` knows whom to look for even if the rest never arrives
    {task or supervisor state JSON}   each state change the supervisor pushes through a pipe, until
                         every task is up (has run for `settle` s; a built-in GPU task has also seen its
                         GPUs: policy.py) or has ended for good (the supervisor then closes the pipe)
    {state files}...     a final snapshot of state/*.json
    ALIVE                when the supervisor still runs

then exits: readiness is pushed by the supervisor over the command's own output, never polled. A
per-host flock makes it idempotent: a launch retried after a lost connection reports the supervisor the
first attempt started instead of starting a second (and, for that one, waits on its state files).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

from ..run.layout import RunLayout
from .core import DEFAULTS, Supervisor
from .files import read_json
from .procfs import proc_pgid


def supervisor_lock(layout: RunLayout, host: str) -> int | None:
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


def redirect_stdio(log_path: str) -> None:
    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)


def _emit(lines: list[str]) -> None:
    """To `start`; if it went away (its connection closed) the supervisor lives on regardless."""
    with contextlib.suppress(OSError):
        sys.stdout.write("".join(line + "\n" for line in lines))
        sys.stdout.flush()


def _relay(fd: int, timeout: float) -> None:
    """Relay the state lines the supervisor pushes until it closes the pipe (every task runs or ended
    for good) or exits, at most `timeout` s."""
    import select

    deadline = time.monotonic() + timeout
    pending = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        *complete, pending = (pending + chunk).split(b"\n")
        _emit([line.decode("utf-8", "replace") for line in complete if line.startswith(b"{")])


def _tasks_up(layout: RunLayout, host: str, timeout: float, settle: float) -> None:
    """For a supervisor another launcher started: wait on its state files until every task has run for
    `settle` s or ended for good (the pushed states went to that launcher), as the supervisor does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sup = read_json(layout.supervisor_state_file(host)) or {}
        names = sup.get("tasks") or []
        states = [read_json(os.path.join(layout.state, f"{name}.json")) or {} for name in names]
        if all(st.get("final") or (st.get("state") == "running" and time.time() - (st.get("started_at") or 0) >= settle)
               for st in states):
            return
        time.sleep(0.1)


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
    lock = supervisor_lock(layout, host)
    if lock is None:  # this run's supervisor already runs here (a retried launch): report that one
        return report_existing(layout, host, ready_timeout)
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the supervisor: it keeps the lock fd (inherited) for as long as it lives
        code = 1
        try:
            os.close(read_end)
            os.setsid()
            redirect_stdio(os.path.join(layout.logs, f"supervisor-{host}.log"))
            code = Supervisor(run_dir, host, ready_fd=write_end).serve()
        except BaseException:
            import traceback

            traceback.print_exc()  # to the supervisor's log
        finally:
            os._exit(code)  # never return into the launcher's code (or run its exit handlers)
    os.close(write_end)
    os.close(lock)
    return relay_and_report(layout, pid, read_end, ready_timeout)


def report_existing(layout: RunLayout, host: str, ready_timeout: float) -> int:
    """A supervisor another launch started: its pid, then its state files once every task runs."""
    started = time.monotonic()
    pid = _existing_supervisor(layout, host, ready_timeout)
    if pid is not None:
        _emit([f"PID {pid}"])
        options = (read_json(layout.run_file) or {}).get("supervisor") or {}
        _tasks_up(layout, host, ready_timeout - (time.monotonic() - started),
                  float(options.get("settle", DEFAULTS["settle"])))
    return _final_report(layout, pid)


def relay_and_report(layout: RunLayout, pid: int | None, read_end: int, ready_timeout: float) -> int:
    """A supervisor that pushes its states through `read_end` (forked here, or the job step's of a Slurm
    run: training/supervisor/handover.py): its pid, every state until every task runs, the state files."""
    if pid is not None:
        _emit([f"PID {pid}"])
        _relay(read_end, ready_timeout)
    os.close(read_end)
    return _final_report(layout, pid)


def _final_report(layout: RunLayout, pid: int | None) -> int:
    lines = []
    if os.path.isdir(layout.state):
        for name in sorted(os.listdir(layout.state)):
            if name.endswith(".json"):
                with contextlib.suppress(OSError), open(os.path.join(layout.state, name), encoding="utf-8") as f:
                    lines.append(f.read().strip())
    if pid is not None and _alive(pid):
        lines.append("ALIVE")
    _emit(lines)
    return 0 if pid is not None else 1
