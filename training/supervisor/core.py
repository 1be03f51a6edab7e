"""The Supervisor: starts this host's tasks, restarts them by policy, ends them with the run, stops them
on SIGTERM, and records every state change (state/<job>-<task>.json, events/supervisor-<host>.jsonl).

It leads its own session and process group and every task it spawns stays in that group, so `stop`
can always kill the whole group even when the supervisor itself is gone. Its umask is 077: the run's
logs, events, state and checkpoints are private to the user (files 0600, directories 0700).

Run-wide decisions (training/supervisor/policy.py) are taken by every supervisor from what the peers
report (training/supervisor/run_view.py): each task's final exit is sent to every other host; when the
run has finished or failed, every supervisor stops its remaining tasks cleanly and exits; in
multi-worker-mirrored mode a failed worker restarts the whole group.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from typing import TYPE_CHECKING

from ..run.layout import RUN_DIR_ENV, RunLayout
from ..telemetry.host_facts import FactsWriter
from ..telemetry.schema import dumps
from ..telemetry.task_record import HISTORY_KEPT, TaskRecord, held_by_user
from ..telemetry.traffic import TaskTraffic
from . import notes
from .children import Child, Task, spawn
from .ending import end_processes, kill_leftovers, term_wait_kill
from .exit_reason import exit_reason
from .files import write_json_atomic
from .hold import is_held
from .log_cap import LogCap
from .policy import RestartBudget, restart_cannot_fix, restarts_as_group, waits_for_gpu_check
from .ports import port_taken
from .procfs import TASK_ID_ENV
from .resize import RunFileWatch, apply_resize
from .run_view import RunView
from .subreaper import become_subreaper, reap_orphans

if TYPE_CHECKING:
    from typing import Any

# settle: a task counts as up for `start` once it has run this long (a missing TensorFlow, a bad import
# or a wrong path fails within it, so `start` fails instead of saying "started").
# `nice`: the tasks' niceness. Training saturates a host's cores; what reads or stops the run there (sshd,
# the `status` and `stop` scripts, this supervisor, the agent) keeps its normal priority and so answers
# at once, while the tasks still get every cycle nobody else wants (issue 24: `status` under load).
DEFAULTS = {"backoff_initial": 1.0, "backoff_max": 30.0, "grace": 10.0, "poll": 0.1, "settle": 1.0, "nice": 10}
GROUP_KILL_GRACE_S = 2.0  # a worker hung in a collective gets this long after SIGTERM
FACTS_EVERY_S = 1.0  # how often the tasks' processes are looked at (training/telemetry/host_facts.py)
PEER_FLUSH_S = 30.0  # at the end: how long to keep telling unreachable peers our last news
PYTHON_ARG = "TFCLUSTER_ARG_PYTHON"  # the user command's {python}: `~/` is this host's home


class Supervisor:
    def __init__(self, run_dir: str, host: str, ready_fd: int | None = None) -> None:
        os.umask(0o077)
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
        max_restarts = int(training.get("max_restarts", 3)) if self.restart_policy == "on-failure" else 0
        window = float(training.get("restart_window", 600.0))
        opts = {**DEFAULTS, **self.run.get("supervisor", {})}
        self.backoff_initial = float(opts["backoff_initial"])
        self.backoff_max = float(opts["backoff_max"])
        self.grace = float(opts["grace"])
        self.poll = float(opts["poll"])
        self.settle = float(opts["settle"])
        self.nice = int(opts["nice"])
        self.mode: str = plan.get("mode", "between-graph")
        self.budget_args = (max_restarts, window)
        self.tasks = [self.new_task(t) for t in plan["tasks"] if t["host"] == host]
        self.resize = RunFileWatch(self.layout.run_file, self.run)  # a resize's new run.json (resize.py)
        self.view = RunView(self.run, host)
        # Group restarts seen (multi-worker-mirrored); a resize's serial (resize.py) on a host it launched.
        self.epoch = self.resize.serial
        self.state = "starting"
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.stop_requested = False
        self.subreaper = False  # every descendant is ours (subreaper.py); `stop` trusts its verdict only then
        self.log_cap = LogCap([self.layout.log_file(t.job, t.index) for t in self.tasks],
                              float(training.get("max_log_mb", 1024.0)))
        for d in (*self.layout.dirs(), self.layout.checkpoints(str(training.get("checkpoint_dir", "checkpoints")))):
            os.makedirs(d, exist_ok=True)
        for private in (self.layout.root, self.layout.run_file):
            with contextlib.suppress(OSError):  # made by `start`'s shell, before our umask
                os.chmod(private, 0o700 if os.path.isdir(private) else 0o600)
        os.chdir(self.layout.code)  # the tasks' working directory (posix_spawn has no cwd of its own)
        self._events = open(self.layout.supervisor_events_file(host), "a", encoding="utf-8")  # noqa: SIM115

    def new_task(self, t: dict[str, Any]) -> Task:
        """A task of run.json's plan, as this supervisor runs it."""
        return Task(job=t["job"], index=int(t["index"]), command=list(t["command"]), env=dict(t["env"]),
                    port=t.get("port") if t.get("in_cluster", True) else None, budget=RestartBudget(*self.budget_args))

    # -- records
    def _write_self(self) -> None:
        data = {
            "kind": "supervisor", "host": self.host, "run_id": self.run.get("run_id"), "pid": os.getpid(),
            "pgid": os.getpgid(0), "state": self.state, "outcome": self.view.outcome, "epoch": self.epoch,
            "started_at": self.started_at, "ended_at": self.ended_at, "tasks": [t.name for t in self.tasks],
            "subreaper": self.subreaper, "updated_at": time.time(), "resize_serial": self.resize.serial,
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
        """The task's state changed: its one record (training/telemetry/task_record.py), written as an
        event line, as its state file and, with --detach, to `start`: the same document each time."""
        task.state = state
        restarting = state == "restarting"
        record = TaskRecord(
            time.time(), self.host, task.job, task.index, state, pid=task.pid, exit_code=task.exit_code,
            restarts=task.restarts, signal=task.exit_signal, final=task.final, stopped_by=task.stopped_by,
            restarts_left=task.budget.left, restart_reason=task.restart_reason if restarting else None,
            error=task.error, started_at=task.started_at, exited_at=task.exited_at,
            next_start=task.next_start if restarting else None, history=tuple(task.history[-HISTORY_KEPT:]))
        data = record.to_json()
        self._events.write(dumps(data) + "\n")
        self._events.flush()
        write_json_atomic(self.layout.task_state_file(task.job, task.index), data)
        self._push(data)

    # -- task control
    def _env(self, task: Task, attempt: str) -> dict[str, str]:
        """A task process's environment: ours (with any forwarded variables), the plan's, the run marker,
        its `<job>-<i>#<attempt>` id, and lib/ (tfcluster's package, `tfcluster_report`) on its PYTHONPATH, which
        comes after the program's own directory: a user's module named like one of ours is theirs."""
        env = {**os.environ, **task.env, RUN_DIR_ENV: self.layout.root, TASK_ID_ENV: f"{task.name}#{attempt}"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (self.layout.lib, env.get("PYTHONPATH")) if p)
        if env.get(PYTHON_ARG, "").startswith("~/"):
            env[PYTHON_ARG] = os.path.expanduser(env[PYTHON_ARG])
        return env

    def _note(self, task: Task, text: str) -> str:
        """Append a `--- tfcluster:` line to the task's log; returns the log's path."""
        log_path = self.layout.log_file(task.job, task.index)
        with open(log_path, "ab") as log:
            log.write(notes.line(text))
        return log_path

    def _spawn(self, task: Task) -> None:
        self._record(task, "starting")
        log_path = self._note(task, notes.starting(task.label, task.restarts + 1, time.ctime()))
        if task.port is not None and port_taken(task.port):
            # Another run (or program) holds the port: its TF server would fail to bind, or worse, this
            # run's tasks would reach that one. Fail clearly, for good: a restart cannot help.
            task.error = f"port {task.port} is in use by another process on {self.host}"
            self._note(task, notes.cannot_start(task.label, task.error))
            task.stopped_by = None
            self._final(task, 98, None)
            return
        try:
            # Same process group as the supervisor (no new session): `stop` kills the group. The
            # supervisor runs in the code dir, so that is the task's working directory too.
            task.proc = Child(spawn(task.command, self._env(task, str(task.restarts)), log_path, self.nice))
        except OSError as exc:
            self._note(task, notes.cannot_start(task.label, exc))
            task.proc = None
            self._exited(task, 127, None)
            return
        task.started_at = time.time()
        task.epoch = self.epoch
        task.exit_code = task.exit_signal = None
        self._record(task, "running")

    def _exited(self, task: Task, code: int | None, sig: int | None) -> None:
        """The task's process ended: final, or restarted alone or with its group, by policy."""
        task.exit_code, task.exit_signal = code, sig
        task.exited_at = time.time()
        task.history.append({"pid": task.pid, "exit_code": code, "signal": sig, "at": task.exited_at})
        kill_leftovers(self.layout.root, f"{task.name}#{task.restarts}")
        if task.started_at is not None:
            task.budget.ran_for(task.exited_at - task.started_at)
        if task.stopped_by is None and is_held(self.layout, task.job, task.index):
            task.stopped_by = "user"
        if self.stop_requested and task.stopped_by is None:
            task.stopped_by = "stop"
        if task.stopped_by is None and code != 0 and self.view.outcome is None:
            task.error = exit_reason(self.layout.log_file(task.job, task.index))  # why, for status and dash
        elif code == 0:
            task.error = None  # an earlier attempt's reason is no longer news
        if (code == 0 or task.stopped_by is not None or self.view.outcome is not None
                or restart_cannot_fix(self.run["plan"], code)):
            self._final(task, code, sig)
            return
        if restarts_as_group(self.mode, task.job) and task.epoch < self.epoch:
            self._restart(task, "group", charge=False)  # killed by (or failed in) a group restart
            return
        if not task.budget.take():
            self._final(task, code, sig)
            return
        if restarts_as_group(self.mode, task.job):
            self._group_restart(self.epoch + 1, notes.exited(task.label, notes.how(code, sig)), failed=task)
            self.view.peers_group_restart(self.epoch, f"{task.label} on {self.host} exited ({notes.how(code, sig)})")
        self._restart(task, "failure" if not restarts_as_group(self.mode, task.job) else "group", charge=False)

    def _restart(self, task: Task, reason: str, *, charge: bool) -> None:
        if charge and not task.budget.take():
            self._final(task, task.exit_code, task.exit_signal)
            return
        delay = min(self.backoff_max, self.backoff_initial * (2 ** min(task.budget.used, 10)))
        task.restarts += 1
        task.restart_reason = reason
        task.next_start = time.time() + delay
        self._record(task, "restarting")

    def _final(self, task: Task, code: int | None, sig: int | None) -> None:
        task.exit_code, task.exit_signal = code, sig
        task.final = True
        if held_by_user(task.stopped_by):  # in its own log, where the user looks for why it ended
            self._note(task, notes.held(task.label))
        self._record(task, "exited")
        self.view.task_final(task.name, code, task.stopped_by)

    def _group_restart(self, epoch: int, cause: str, failed: Task | None = None) -> None:
        """Multi-worker-mirrored: every chief and worker task here restarts together (from the last
        checkpoint, as the trainer always resumes). `failed`: the task whose exit caused it (reaped)."""
        if epoch <= self.epoch:
            return
        self.epoch = epoch
        members = [t for t in self.tasks if restarts_as_group(self.mode, t.job) and not t.final and t is not failed]
        for task in members:
            self._note(task, notes.group_restart(epoch, cause))
        term_wait_kill([t.proc for t in members if t.state == "running" and t.proc is not None], GROUP_KILL_GRACE_S)
        self._write_self()

    def _reap(self) -> None:
        for task in self.tasks:
            if task.proc is None or task.state != "running":
                continue
            rc = task.proc.poll()
            if rc is not None:
                self._exited(task, None if rc < 0 else rc, -rc if rc < 0 else None)

    def _end_tasks(self, stopped_by: str, grace: float) -> None:
        """TERM every task still here (and every process of our group), KILL what outlives `grace`; each
        ends final, marked as ended by `stopped_by` (never counted as a failure)."""
        for task in self.tasks:
            if not task.final and task.stopped_by is None:
                task.stopped_by = stopped_by
        running = [t for t in self.tasks if t.state == "running" and t.proc is not None]
        left = end_processes(self.layout.root, [t.pid for t in running if t.pid], grace)
        if left:
            print(f"after SIGKILL, still alive: {left}", flush=True)
        for task in running:
            assert task.proc is not None
            rc = task.proc.wait()
            task.exited_at = time.time()
            self._final(task, None if rc < 0 else rc, -rc if rc < 0 else None)
        for task in self.tasks:
            if not task.final:
                self._final(task, task.exit_code, task.exit_signal)

    def _signal_ready(self) -> None:
        """Close the launcher's pipe once every task is up (policy.py) or has ended for good: that is
        `start`'s readiness (a task failing at once, or waiting to be restarted, keeps it open until it
        runs on or fails for good)."""
        if self.ready_fd is not None and all(t.final or self._up(t, time.time()) for t in self.tasks):
            os.close(self.ready_fd)
            self.ready_fd = None

    def _up(self, t: Task, now: float) -> bool:
        if t.state != "running" or t.started_at is None or now - t.started_at < self.settle:
            return False
        if not waits_for_gpu_check(self.run["plan"], t.env):
            return True
        with contextlib.suppress(OSError):  # this attempt's mark, not an earlier one's
            return os.stat(self.layout.gpus_seen_file(t.job, t.index)).st_mtime >= t.started_at
        return False

    def _handle_term(self, signum: int, frame: object) -> None:
        self.stop_requested = True

    def serve(self) -> int:
        try:
            return self._serve()
        except Exception:
            # A bug here must not leave tasks unsupervised and a state file saying "running".
            import traceback

            traceback.print_exc()  # to logs/supervisor-<host>.log
            self.stop_requested = True
            try:
                self._end_tasks("stop", self.grace)
            finally:
                self.state, self.ended_at = "crashed", time.time()
                self._write_self()
            return 1

    def _serve(self) -> int:
        signal.signal(signal.SIGTERM, self._handle_term)
        signal.signal(signal.SIGINT, self._handle_term)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the SSH session that started us may go away
        self.subreaper = become_subreaper()
        self._write_self()
        self.view.open_channel(lambda text: print(f"peers: {text}", flush=True),
                               self.layout.peer_marks_file(self.host))
        for task in self.tasks:
            if self.view.channel_error:  # our control port taken, or no key: fail this one here, clearly
                task.error = self.view.channel_error
                self._note(task, notes.cannot_start(task.label, task.error))
                self._final(task, 98, None)
            else:
                self._spawn(task)
        self.state = "running"
        self._write_self()
        self._signal_ready()
        tailers = self._progress_tailers()
        facts = FactsWriter(self.layout, self.host, {t.name: t.port for t in self.tasks},
                            traffic=TaskTraffic.for_plan(self.run["plan"], self.host))
        # The first look one interval after the tasks started, not at once: they have used no CPU and
        # listen nowhere yet, and the first look reads every process's environment (once per pid), work
        # that would compete with the hosts still starting when many share a machine.
        next_facts = time.monotonic() + FACTS_EVERY_S
        while not self.stop_requested:
            if time.monotonic() >= next_facts:
                if self.resize.changed():  # `tfcluster resize`: take on and drop tasks (resize.py)
                    facts, tailers = apply_resize(self, facts, tailers)
                facts.update()
                reap_orphans({t.pid for t in self.tasks if t.pid})
                next_facts = time.monotonic() + FACTS_EVERY_S
            running = self._step()
            self._signal_ready()
            if not running:
                break
            if tailers:
                from ..progress.tailer import poll_tailers

                poll_tailers(tailers)
            self.log_cap.check()  # after the tailers read what the logs hold
            time.sleep(self.poll)
        if self.stop_requested:
            self._end_tasks("stop", self.grace)
            self.state = "stopped"
        else:
            ended_well = all(t.exit_code == 0 or t.stopped_by in ("user", "run") for t in self.tasks)
            self.state = self.view.outcome or ("finished" if ended_well else "failed")
        self.ended_at = time.time()
        facts.update()
        self._write_self()
        if tailers:
            from ..progress.tailer import close_tailers

            close_tailers(tailers)
        self.view.close(PEER_FLUSH_S if not self.stop_requested else 1.0)
        self._events.close()
        return 0 if self.state in ("finished", "stopped") else 1

    def _step(self) -> bool:
        """One turn of the loop: reap, hear the peers, end with the run, restart what is due. False when
        this host is done (every task final, or the run's outcome decided and its tasks ended)."""
        self._reap()
        for kind, value in self.view.poll():
            if kind == "group-restart":
                self._group_restart(value, "a task on another host failed")
        if self.view.outcome is not None:
            self._end_tasks("run", self.grace)
            return False
        now = time.time()
        for task in self.tasks:
            if task.state == "restarting" and now >= task.next_start:
                if is_held(self.layout, task.job, task.index):  # stopped for good while it waited
                    task.stopped_by = "user"
                    self._final(task, task.exit_code, task.exit_signal)
                else:
                    self._spawn(task)
        return not all(t.final for t in self.tasks)

    def _progress_tailers(self) -> list[Any]:
        """Progress from the logs of the user's own programs (built-in programs report themselves);
        created after `ready`, so their import stays off `start`'s path."""
        if self.run["plan"].get("uses_user_command") is not True:
            return []
        from ..progress.tailer import log_progress_tailers

        return log_progress_tailers(self.layout, self.host, self.run["plan"])
