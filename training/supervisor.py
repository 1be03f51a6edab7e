"""The per-host supervisor: starts this host's tasks, restarts them by policy, stops them on SIGTERM.

Shipped to every host (stdlib only). It leads its own session and process group and every task it
spawns stays in that group: `stop` can always kill the whole group even when the supervisor itself
is gone.

    python -S -m training.supervisor --detach --run-dir R --host NAME   # what `start` runs (see below)
    python -m training.supervisor --run-dir R --host NAME              # supervise in the foreground
    python -m training.supervisor --probe --run-dir R                  # print states + live processes (JSON)
    python -m training.supervisor --stop --run-dir R [--grace S]       # stop the run on this host (JSON)

`--detach` forks the supervisor into its own session (stdio on its log file, away from the SSH
channel), waits until it has spawned every task, prints `PID <pid>`, the state files (one JSON line
each) and `ALIVE` if it still runs, and exits: one process and one round trip per host, no polling. A
lock file makes it idempotent: when this run's supervisor already runs on the host (a launch retried
after a lost connection), it reports that one instead of starting a second.

Every process of a run carries `TFCLUSTER_RUN_DIR=<run dir>` in its environment; `--stop` and
`--probe` find the run's processes by that marker in /proc, so orphans cannot hide.

Start-up cost matters (`start` pays it on every host, and on loopback test machines all hosts share
the same cores): no `subprocess`, `dataclasses` or `typing` at run time, tasks are started with
`os.posix_spawnp`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from typing import TYPE_CHECKING

from training.layout import RUN_DIR_ENV, RunLayout
from training.roles import STAND_IN_ENV, is_finisher
from training.telemetry.schema import KIND_TASK_STATE, dumps, make_event

if TYPE_CHECKING:
    from typing import Any

TASK_ID_ENV = "TFCLUSTER_TASK_ID"  # "<job>-<index>#<attempt>": finds a task's leftover children
DEFAULTS = {"backoff_initial": 1.0, "backoff_max": 30.0, "grace": 10.0, "poll": 0.1}


def write_json_atomic(path: str, data: dict[str, Any]) -> None:
    """Readers (probe, status) must never see a half-written file: write a temp file, then rename."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(data, separators=(",", ":")) + "\n")
    os.replace(tmp, path)


# ---- /proc helpers (Linux) -------------------------------------------------------------------------

def _proc_environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _proc_pgid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # comm may contain spaces and parentheses: fields after the last ')' are: state ppid pgrp ...
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) < 3 or fields[0] == "Z":
        return None  # zombies hold no resources; their parent reaps them
    return int(fields[2])


def _proc_cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def run_processes(run_dir: str, exclude: set[int] | None = None) -> list[dict[str, Any]]:
    """Every live process whose environment marks it as part of this run (the supervisor, its tasks,
    and anything they spawned, even if reparented)."""
    exclude = exclude or set()
    me = os.getpid()
    found = []
    for pid in _all_pids():
        if pid == me or pid in exclude:
            continue
        env = _proc_environ(pid)
        if env.get(RUN_DIR_ENV) != run_dir:
            continue
        pgid = _proc_pgid(pid)
        if pgid is None:
            continue
        found.append({"pid": pid, "pgid": pgid, "task": env.get(TASK_ID_ENV, ""), "args": _proc_cmdline(pid)})
    return found


def _signal_pids(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


# ---- supervising ------------------------------------------------------------------------------------

# Signals the supervisor (or Python) ignores, which a spawned program would otherwise inherit ignored.
_RESET_SIGNALS = (signal.SIGHUP, signal.SIGPIPE, signal.SIGXFSZ)


def spawn(argv: list[str], env: dict[str, str], log_path: str) -> int:
    """Start a task program (PATH lookup), stdin from /dev/null, stdout and stderr appended to its
    log, in the supervisor's process group and working directory. OSError when it cannot be run."""
    # `~/` as in hosts.toml's `python = "~/venv/bin/python"`: the remote home, as everywhere else.
    program = os.path.expanduser(argv[0]) if argv[0].startswith("~/") else argv[0]
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)  # close-on-exec by default
    try:
        return os.posix_spawnp(program, [program, *argv[1:]], env, file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, fd, 1),
            (os.POSIX_SPAWN_DUP2, fd, 2),
        ], setsigdef=_RESET_SIGNALS)
    finally:
        os.close(fd)


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
        "command",
        "env",
        "exit_code",
        "exit_signal",
        "exited_at",
        "final",
        "history",
        "index",
        "job",
        "next_start",
        "proc",
        "restarts",
        "started_at",
        "state",
    )

    def __init__(self, job: str, index: int, command: list[str], env: dict[str, str]) -> None:
        self.job = job
        self.index = index
        self.command = command
        self.env = env
        self.proc: Child | None = None
        self.state = "starting"
        self.restarts = 0
        self.exit_code: int | None = None
        self.exit_signal: int | None = None
        self.final = False  # done (exit 0), or failed for good: never started again
        self.next_start = 0.0
        self.started_at: float | None = None
        self.exited_at: float | None = None
        self.history: list[dict[str, Any]] = []

    @property
    def name(self) -> str:
        return f"{self.job}-{self.index}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


class Supervisor:
    def __init__(self, run_dir: str, host: str, ready_fd: int | None = None) -> None:
        self.ready_fd = ready_fd  # --detach: written and closed once every task was spawned
        self.layout = RunLayout(run_dir)
        self.host = host
        with open(self.layout.run_file, encoding="utf-8") as f:
            self.run = json.load(f)
        plan = self.run["plan"]
        training = plan.get("training", {})
        self.restart_policy: str = training.get("restart", "on-failure")
        self.max_restarts: int = int(training.get("max_restarts", 3))
        opts = {**DEFAULTS, **self.run.get("supervisor", {})}
        self.backoff_initial = float(opts["backoff_initial"])
        self.backoff_max = float(opts["backoff_max"])
        self.grace = float(opts["grace"])
        self.poll = float(opts["poll"])
        self.tasks = [
            Task(job=t["job"], index=int(t["index"]), command=list(t["command"]), env=dict(t["env"]))
            for t in plan["tasks"]
            if t["host"] == host
        ]
        self.mode: str = plan.get("mode", "between-graph")
        # Stand-ins (below) speak the built-in programs' done-queue protocol; a user's program has its own.
        self.builtin_programs = plan.get("uses_user_command") is False
        self.helpers: list[Child] = []  # stand-ins still running
        self.state = "starting"
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.stop_requested = False
        for d in self.layout.dirs():
            os.makedirs(d, exist_ok=True)
        os.chdir(self.layout.code)  # the tasks' working directory (posix_spawn has no cwd of its own)
        self._events = open(self.layout.supervisor_events_file(host), "a", encoding="utf-8")  # noqa: SIM115

    # -- records
    def _write_self(self) -> None:
        write_json_atomic(self.layout.supervisor_state_file(self.host), {
            "kind": "supervisor", "host": self.host, "run_id": self.run.get("run_id"), "pid": os.getpid(),
            "pgid": os.getpgid(0), "state": self.state, "started_at": self.started_at,
            "ended_at": self.ended_at, "tasks": [t.name for t in self.tasks], "updated_at": time.time(),
        })

    def _record(self, task: Task, state: str) -> None:
        task.state = state
        now = time.time()
        self._events.write(dumps(make_event(
            KIND_TASK_STATE, self.host, job=task.job, task=task.index, t=now, state=state, pid=task.pid,
            exit_code=task.exit_code, restarts=task.restarts, signal=task.exit_signal, final=task.final,
        )) + "\n")
        self._events.flush()
        write_json_atomic(self.layout.task_state_file(task.job, task.index), {
            "kind": "task", "host": self.host, "job": task.job, "task": task.index, "state": state,
            "pid": task.pid, "restarts": task.restarts, "exit_code": task.exit_code,
            "signal": task.exit_signal, "final": task.final, "started_at": task.started_at,
            "exited_at": task.exited_at, "next_start": task.next_start if state == "restarting" else None,
            "history": task.history[-20:], "updated_at": now,
        })

    # -- task control
    def _env(self, task: Task, attempt: str, **extra: str) -> dict[str, str]:
        """A task process's environment: the plan's, the run marker, and its `<job>-<i>#<attempt>` id."""
        return {**os.environ, **task.env, RUN_DIR_ENV: self.layout.root, TASK_ID_ENV: f"{task.name}#{attempt}",
                **extra}

    def _note(self, task: Task, text: str) -> str:
        """Append a `--- tfcluster:` line to the task's log; returns the log's path."""
        log_path = self.layout.log_file(task.job, task.index)
        with open(log_path, "ab") as log:
            log.write(f"--- tfcluster: {text}\n".encode())
        return log_path

    def _spawn(self, task: Task) -> None:
        env = self._env(task, str(task.restarts))
        self._record(task, "starting")
        log_path = self._note(task, f"starting {task.name} (attempt {task.restarts + 1}) at {time.ctime()}")
        try:
            # Same process group as the supervisor (no new session): `stop` kills the group. The
            # supervisor runs in the code dir, so that is the task's working directory too.
            task.proc = Child(spawn(task.command, env, log_path))
        except OSError as exc:
            self._note(task, f"cannot start {task.name}: {exc}")
            task.proc = None
            self._exited(task, 127, None)
            return
        task.started_at = time.time()
        task.exit_code = task.exit_signal = None
        self._record(task, "running")

    def _exited(self, task: Task, code: int | None, sig: int | None) -> None:
        task.exit_code, task.exit_signal = code, sig
        task.exited_at = time.time()
        task.history.append({"pid": task.pid, "exit_code": code, "signal": sig, "at": task.exited_at})
        self._kill_leftovers(task)
        ok = code == 0
        if ok or self.stop_requested or self.restart_policy == "never" or task.restarts >= self.max_restarts:
            task.final = True
            self._record(task, "exited")
            if not ok and not self.stop_requested:
                self._stand_in(task)
            return
        delay = min(self.backoff_max, self.backoff_initial * (2 ** task.restarts))
        task.restarts += 1
        task.next_start = time.time() + delay
        self._record(task, "restarting")

    def _stand_in(self, task: Task) -> None:
        """A finisher failed for good: run its program once more as a stand-in (training/stand_in.py)
        that tells the serving tasks it will not finish, so they, and the run, still end by themselves."""
        if not self.builtin_programs or not is_finisher(self.mode, task.job):
            return
        env = self._env(task, "stand-in", **{STAND_IN_ENV: "1"})
        log_path = self._note(task, f"{task.name} failed for good; telling the serving tasks it will not finish, "
                                    f"at {time.ctime()}")
        try:
            self.helpers.append(Child(spawn(task.command, env, log_path)))
        except OSError as exc:
            self._note(task, f"cannot start the stand-in: {exc}")

    def _kill_leftovers(self, task: Task) -> None:
        """A task run through `sh -c` may leave its real program behind (holding the TF port)."""
        marker = f"{task.name}#{task.restarts}"
        left = [p["pid"] for p in run_processes(self.layout.root) if p["task"] == marker]
        _signal_pids(left, signal.SIGKILL)

    def _reap(self) -> None:
        self.helpers = [child for child in self.helpers if child.poll() is None]
        for task in self.tasks:
            if task.proc is None or task.state != "running":
                continue
            rc = task.proc.poll()
            if rc is None:
                continue
            if rc < 0:
                self._exited(task, None, -rc)
            else:
                self._exited(task, rc, None)

    def _signal_ready(self) -> None:
        if self.ready_fd is not None:
            with contextlib.suppress(OSError):  # the launcher may be gone (its SSH channel closed)
                os.write(self.ready_fd, b"ready\n")
            os.close(self.ready_fd)
            self.ready_fd = None

    def _handle_term(self, signum: int, frame: object) -> None:
        self.stop_requested = True

    def _stop_tasks(self) -> None:
        running = [t for t in self.tasks if t.state == "running" and t.proc is not None]
        pids = [t.pid for t in running if t.pid is not None]
        # TERM every process of the group but ourselves (catches `sh -c` grandchildren too).
        group = [p["pid"] for p in run_processes(self.layout.root) if p["pgid"] == os.getpgid(0)]
        _signal_pids(sorted(set(pids) | set(group)), signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline and any(t.proc.poll() is None for t in running if t.proc):
            time.sleep(0.05)
        survivors = [p["pid"] for p in run_processes(self.layout.root)]
        _signal_pids(survivors, signal.SIGKILL)
        for helper in self.helpers:
            helper.wait()
        self.helpers = []
        for task in running:
            assert task.proc is not None
            rc = task.proc.wait()
            task.exit_code, task.exit_signal = (None, -rc) if rc < 0 else (rc, None)
            task.exited_at = time.time()
            task.final = True
            self._record(task, "exited")
        for task in self.tasks:
            if not task.final:
                task.final = True
                self._record(task, "exited")

    def serve(self) -> int:
        try:
            return self._serve()
        except Exception:
            # A bug here must not leave tasks unsupervised and a state file saying "running".
            import traceback

            traceback.print_exc()  # to logs/supervisor-<host>.log
            self.stop_requested = True
            try:
                self._stop_tasks()
            finally:
                self.state, self.ended_at = "crashed", time.time()
                self._write_self()
            return 1

    def _serve(self) -> int:
        signal.signal(signal.SIGTERM, self._handle_term)
        signal.signal(signal.SIGINT, self._handle_term)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the SSH session that started us may go away
        self._write_self()
        for task in self.tasks:
            self._spawn(task)
        self.state = "running"
        self._write_self()
        self._signal_ready()
        while not self.stop_requested:
            self._reap()
            now = time.time()
            for task in self.tasks:
                if task.state == "restarting" and now >= task.next_start:
                    self._spawn(task)
            if all(t.final for t in self.tasks) and not self.helpers:
                break
            time.sleep(self.poll)
        if self.stop_requested:
            self._stop_tasks()
            self.state = "stopped"
        else:
            self.state = "finished" if all(t.exit_code == 0 for t in self.tasks) else "failed"
        self.ended_at = time.time()
        self._write_self()
        self._events.close()
        return 0 if self.state in ("finished", "stopped") else 1


# ---- probe and stop (run by the orchestrator over the transport, one round trip each) ----------------

def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def probe(run_dir: str) -> dict[str, Any]:
    """This host's view of the run: supervisor and task state files, and which run processes live."""
    layout = RunLayout(run_dir)
    supervisors: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    if os.path.isdir(layout.state):
        for name in sorted(os.listdir(layout.state)):
            if not name.endswith(".json"):
                continue
            data = _read_json(os.path.join(layout.state, name))
            if data is None:
                continue
            if data.get("kind") == "supervisor":
                pid = data.get("pid")
                data["alive"] = isinstance(pid, int) and _proc_pgid(pid) is not None and \
                    _proc_environ(pid).get(RUN_DIR_ENV) == run_dir
                supervisors.append(data)
            else:
                tasks.append(data)
    return {"run_dir": run_dir, "exists": os.path.isdir(run_dir), "supervisors": supervisors, "tasks": tasks,
            "processes": run_processes(run_dir), "now": time.time()}


def stop(run_dir: str, grace: float) -> dict[str, Any]:
    """SIGTERM the supervisor(s), wait up to `grace`, then KILL their groups and any run process left."""
    layout = RunLayout(run_dir)
    sup_pids: list[int] = []
    if os.path.isdir(layout.state):
        for name in os.listdir(layout.state):
            if name.startswith("supervisor-") and name.endswith(".json"):
                data = _read_json(os.path.join(layout.state, name)) or {}
                pid = data.get("pid")
                if isinstance(pid, int) and _proc_environ(pid).get(RUN_DIR_ENV) == run_dir:
                    sup_pids.append(pid)
    _signal_pids(sup_pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_proc_pgid(p) is not None for p in sup_pids):
        time.sleep(0.05)
    killed: list[int] = []
    for _ in range(20):  # KILL until nothing is left (a fork may race with the scan)
        left = run_processes(run_dir)
        if not left:
            break
        groups = {p["pgid"] for p in left}
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        pids = [p["pid"] for p in left]
        _signal_pids(pids, signal.SIGKILL)
        killed.extend(pids)
        time.sleep(0.05)
    return {"run_dir": run_dir, "terminated": sup_pids, "killed": sorted(set(killed)),
            "remaining": run_processes(run_dir)}


# ---- --detach: the launcher `start` runs on every host -----------------------------------------------

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
        data = _read_json(layout.supervisor_state_file(host)) or {}
        pid = data.get("pid")
        if isinstance(pid, int) and data.get("state") != "starting":
            return pid
        if time.monotonic() >= deadline:
            return pid if isinstance(pid, int) else None
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    return _proc_pgid(pid) is not None


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.supervisor")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--host", default="")
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--stop", action="store_true")
    parser.add_argument("--detach", action="store_true")
    parser.add_argument("--grace", type=float, default=DEFAULTS["grace"])
    parser.add_argument("--ready-timeout", type=float, default=20.0)
    args = parser.parse_args(argv)
    run_dir = os.path.abspath(args.run_dir)
    if args.probe:
        print(json.dumps(probe(run_dir)))
        return 0
    if args.stop:
        print(json.dumps(stop(run_dir, args.grace)))
        return 0
    if not args.host:
        parser.error("--host is required to supervise")
    if os.environ.get(RUN_DIR_ENV) != run_dir:
        # The marker must be in our own /proc/<pid>/environ (set at exec time), so `stop` finds us too.
        # `start` sets it in the launching shell, which saves this second interpreter start.
        env = {**os.environ, RUN_DIR_ENV: run_dir}
        flags = ["-S"] if sys.flags.no_site else []
        again = ["--run-dir", run_dir, "--host", args.host]
        if args.detach:
            again += ["--detach", "--ready-timeout", str(args.ready_timeout)]
        os.execve(sys.executable, [sys.executable, *flags, "-m", "training.supervisor", *again], env)
    if args.detach:
        return detach(run_dir, args.host, args.ready_timeout)
    return Supervisor(run_dir, args.host).serve()


if __name__ == "__main__":
    sys.exit(main())
