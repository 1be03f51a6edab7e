"""The Supervisor: starts this host's tasks, restarts them by policy, stops them on SIGTERM, and
records every state change (state/<job>-<task>.json and events/supervisor-<host>.jsonl).

It leads its own session and process group and every task it spawns stays in that group, so `stop`
can always kill the whole group even when the supervisor itself is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from typing import TYPE_CHECKING

from training.layout import RUN_DIR_ENV, RunLayout
from training.roles import STAND_IN_ENV, is_finisher
from training.supervisor.children import Child, Task, spawn
from training.supervisor.files import write_json_atomic
from training.supervisor.procfs import TASK_ID_ENV, run_processes, signal_pids
from training.telemetry.schema import KIND_TASK_STATE, dumps, make_event

if TYPE_CHECKING:
    from typing import Any

DEFAULTS = {"backoff_initial": 1.0, "backoff_max": 30.0, "grace": 10.0, "poll": 0.1}


class Supervisor:
    def __init__(self, run_dir: str, host: str, ready_fd: int | None = None) -> None:
        self.ready_fd = ready_fd  # --detach: state changes pushed, closed once every task runs (detach.py)
        if ready_fd is not None:
            os.set_blocking(ready_fd, False)
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
        data = {
            "kind": "supervisor", "host": self.host, "run_id": self.run.get("run_id"), "pid": os.getpid(),
            "pgid": os.getpgid(0), "state": self.state, "started_at": self.started_at,
            "ended_at": self.ended_at, "tasks": [t.name for t in self.tasks], "updated_at": time.time(),
        }
        write_json_atomic(self.layout.supervisor_state_file(self.host), data)
        self._push(data)

    def _push(self, data: dict[str, Any]) -> None:
        """--detach: every state change goes to the launcher too, which relays it to `start` (pushed
        readiness, no polling). Never blocks: a launcher that stopped reading only misses lines."""
        if self.ready_fd is not None:
            with contextlib.suppress(OSError):
                os.write(self.ready_fd, (json.dumps(data, separators=(",", ":")) + "\n").encode())

    def _record(self, task: Task, state: str) -> None:
        task.state = state
        now = time.time()
        self._events.write(dumps(make_event(
            KIND_TASK_STATE, self.host, job=task.job, task=task.index, t=now, state=state, pid=task.pid,
            exit_code=task.exit_code, restarts=task.restarts, signal=task.exit_signal, final=task.final,
        )) + "\n")
        self._events.flush()
        data = {
            "kind": "task", "host": self.host, "job": task.job, "task": task.index, "state": state,
            "pid": task.pid, "restarts": task.restarts, "exit_code": task.exit_code,
            "signal": task.exit_signal, "final": task.final, "started_at": task.started_at,
            "exited_at": task.exited_at, "next_start": task.next_start if state == "restarting" else None,
            "history": task.history[-20:], "updated_at": now,
        }
        write_json_atomic(self.layout.task_state_file(task.job, task.index), data)
        self._push(data)

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
        signal_pids(left, signal.SIGKILL)

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
        """Close the launcher's pipe once every task runs or has ended for good: that is `start`'s
        readiness (a task waiting to be restarted keeps it open)."""
        if self.ready_fd is not None and all(t.state == "running" or t.final for t in self.tasks):
            os.close(self.ready_fd)
            self.ready_fd = None

    def _handle_term(self, signum: int, frame: object) -> None:
        self.stop_requested = True

    def _stop_tasks(self) -> None:
        running = [t for t in self.tasks if t.state == "running" and t.proc is not None]
        pids = [t.pid for t in running if t.pid is not None]
        # TERM every process of the group but ourselves (catches `sh -c` grandchildren too).
        group = [p["pid"] for p in run_processes(self.layout.root) if p["pgid"] == os.getpgid(0)]
        signal_pids(sorted(set(pids) | set(group)), signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline and any(t.proc.poll() is None for t in running if t.proc):
            time.sleep(0.05)
        survivors = [p["pid"] for p in run_processes(self.layout.root)]
        signal_pids(survivors, signal.SIGKILL)
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
            self._signal_ready()
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
