"""One scripted machine: what a real host keeps between tfcluster's commands, in memory, with no process.

A fake for what cannot be real in a unit test (hundreds of hosts, a fault at an exact step): it keeps a
host's state (its code cache, run dirs, the supervisor of each run and its tasks' states) and answers
the operations tfcluster performs on a host the way the real host programs do (training/supervisor's
`--detach`, the read of a run and the stop (the sh scripts of orchestrator/run/read_host.py and
sh_stop.py), the agent's stream, `tail`, `kill`, check's probe), with the same output, so the
orchestrator's own decoders read them. `testkit.scripted_transport` recognises the
commands and calls these operations; this module knows nothing of command strings.

Knobs a test turns on a host: `down` (connections refused), `fail(step, kind, ...)` (a fault at one
step: connection lost before or after the step ran, timeout, non-zero exit), `task_exit` (a task that
exits with this code as soon as it is spawned), `stubborn` (a stop that leaves a process behind),
`kill_supervisor()` / `finish_tasks()` (what happens to a run while nobody watches).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from training.telemetry.task_record import TaskRecord

Step = Literal["connect", "prepare", "ship", "launch", "read", "stop", "purge", "agent", "tail", "kill", "check"]
FaultKind = Literal["lost", "timeout", "exit", "refused"]
_pids = itertools.count(4000)


@dataclass
class Fault:
    step: Step
    kind: FaultKind
    times: int = 1  # fires this many times, then the step works again
    after: bool = False  # lost/timeout: the step ran on the host, only its answer is lost
    exit_code: int = 1
    stderr: str = "scripted failure"


@dataclass
class ScriptedTask:
    job: str
    index: int
    state: str = "starting"
    pid: int | None = None
    restarts: int = 0
    exit_code: int | None = None
    signal: int | None = None
    final: bool = False

    @property
    def name(self) -> str:
        return f"{self.job}-{self.index}"

    @property
    def alive(self) -> bool:
        return self.state == "running"


@dataclass
class ScriptedRun:
    """One run dir on the host."""

    root: str
    run_id: str | None = None  # from run.json, once written
    own_tasks: list[tuple[str, int]] = field(default_factory=list)  # (job, index) of this host's tasks
    code: bool = False
    supervisor_pid: int | None = None
    supervisor_state: str | None = None
    supervisor_alive: bool = False
    tasks: dict[str, ScriptedTask] = field(default_factory=dict)
    logs: dict[str, list[str]] = field(default_factory=dict)  # task name -> lines of its log
    leftover: int | None = None  # a process that survives stop (host.stubborn)


class ScriptedHost:
    def __init__(self, name: str, home: str = "/home/tester", journal: str | None = None) -> None:
        self.name = name
        self.home = home
        self.journal = journal  # a file every step is appended to (visible across worker processes)
        self.lock = threading.RLock()
        self.cache: set[str] = set()  # content hashes in <workdir>/cache
        self.trees: set[str] = set()  # code tree ids in <workdir>/cache/trees
        self.runs: dict[str, ScriptedRun] = {}  # by run dir
        self.down = False
        self.faults: list[Fault] = []
        self.task_exit: dict[str, int] = {}  # task name -> exit code right after it is spawned
        self.stubborn = False
        self.steps: list[Step] = []  # every step that ran on the host, in order
        self.connects = 0
        self.commands = 0  # remote commands run (each one login shell on a real host)
        self.supervisors_started = 0
        self.tf_version = "2.21.0"
        self.known_tasks: list[tuple[str, int]] | None = None  # set: run.json is not parsed (see write_run_file)
        self.busy_ports: set[int] = set()  # in use on the host: check's and start's port tests say so
        self.run_json: dict[str, bytes] = {}  # run dir -> its run.json as last written (prepare, or at `go`)
        self.forwarded_env: dict[str, str] = {}  # the start's `env` frame: in the launcher's memory, no file

    # --- knobs -------------------------------------------------------------------------------------
    def fail(self, step: Step, kind: FaultKind, *, times: int = 1, after: bool = False, exit_code: int = 1,
             stderr: str = "scripted failure") -> None:
        self.faults.append(Fault(step, kind, times, after, exit_code, stderr))

    def take_fault(self, step: Step, *, before: bool = True) -> Fault | None:
        """The next armed fault of this step that fires now: before the step runs (or instead of it:
        `exit`), or after it ran (`after=True`). Used up once it fires."""
        with self.lock:
            for fault in self.faults:
                fires_before = fault.kind in ("exit", "refused") or not fault.after
                if fault.step == step and fault.times > 0 and fires_before == before:
                    fault.times -= 1
                    return fault
        return None

    def record(self, step: Step) -> None:
        with self.lock:
            self.steps.append(step)
            if self.journal is not None:
                with open(self.journal, "a", encoding="utf-8") as f:
                    f.write(f"{self.name} {step}\n")

    def kill_supervisor(self, root: str | None = None) -> None:
        """SIGKILL of the supervisor and its process group: the state files still say running."""
        with self.lock:
            for run in self._runs(root):
                run.supervisor_alive = False  # its group (every task) dies with it; the files stay

    def finish_tasks(self, root: str | None = None, exit_code: int = 0) -> None:
        """Every task of the run exits with `exit_code` for good; the supervisor ends after them."""
        with self.lock:
            for run in self._runs(root):
                for task in run.tasks.values():
                    self._exit(task, exit_code)
                run.supervisor_state = "finished" if exit_code == 0 else "failed"
                run.supervisor_alive = False

    def _runs(self, root: str | None) -> list[ScriptedRun]:
        return [r for r in self.runs.values() if root is None or r.root == root]

    # --- paths -------------------------------------------------------------------------------------
    def path(self, raw: str) -> str:
        """A remote path as the host's shell would see it (`~` is the home)."""
        if raw in ("~", '"$HOME"', "$HOME"):
            return self.home
        for prefix in ("~/", '"$HOME"/', "$HOME/"):
            if raw.startswith(prefix):
                return f"{self.home}/{raw[len(prefix):]}"
        return raw

    # --- start -------------------------------------------------------------------------------------
    def make_run_dir(self, root: str) -> ScriptedRun:
        with self.lock:
            return self.runs.setdefault(root, ScriptedRun(root))

    def place_code(self, root: str, tree: str) -> bool:
        """Link the code tree into the run's code/ if the host has it; False if it does not."""
        with self.lock:
            if tree not in self.trees:
                return False
            self.make_run_dir(root).code = True
            return True

    def remove_unlaunched(self, root: str) -> None:
        """An aborted start: the run dir goes unless a supervisor was launched there."""
        with self.lock:
            run = self.runs.get(root)
            if run is not None and not self.supervisor_state(run):
                del self.runs[root]

    def receive_files(self, hashes: list[str]) -> None:
        with self.lock:
            self.cache.update(hashes)

    def build_tree(self, tree: str, needed: list[str]) -> None:
        with self.lock:
            missing = [h for h in needed if h not in self.cache]
            if missing:
                raise ValueError(f"cannot build tree {tree}: {len(missing)} file(s) not in the cache")
            self.trees.add(tree)

    def write_run_file(self, root: str, data: bytes) -> None:
        with self.lock:
            run = self.make_run_dir(root)
            self.run_json[root] = data
            if self.known_tasks is not None:  # the simulation: the host need not read a 1 MB file to know them
                run.run_id, run.own_tasks = root.rsplit("/", 1)[-1], list(self.known_tasks)
                return
            written = json.loads(data)
            run.run_id = written.get("run_id")
            run.own_tasks = [(t["job"], int(t["index"])) for t in written["plan"]["tasks"] if t["host"] == self.name]

    def launch(self, root: str) -> ScriptedRun:
        """`supervisor --detach`: start the run's supervisor unless one runs (its lock), spawn the tasks."""
        with self.lock:
            run = self.runs.get(root)
            if run is None or not run.code or run.run_id is None:
                raise FileNotFoundError(f"{root}: no code or run.json")
            if run.supervisor_alive:
                return run  # a retried launch reports the running supervisor
            self.supervisors_started += 1
            run.supervisor_pid = next(_pids)
            run.supervisor_alive = True
            run.supervisor_state = "running"
            for job, index in run.own_tasks:
                task = run.tasks.setdefault(f"{job}-{index}", ScriptedTask(job, index))
                self._spawn(task)
                code = self.task_exit.get(task.name)
                if code is not None:
                    self._exit(task, code)
            return run

    def _spawn(self, task: ScriptedTask) -> None:
        task.pid = next(_pids)
        task.state = "running"
        task.exit_code = task.signal = None
        task.final = False

    def _exit(self, task: ScriptedTask, code: int | None, signal: int | None = None) -> None:
        task.state, task.exit_code, task.signal, task.final = "exited", code, signal, True

    # --- what the supervisor reports -------------------------------------------------------------------
    def task_state(self, task: ScriptedTask) -> dict[str, Any]:
        """Its state file: the supervisor's one record of the task (training/telemetry/task_record.py)."""
        return TaskRecord(time.time(), self.name, task.job, task.index, task.state, pid=task.pid,
                          exit_code=task.exit_code, restarts=task.restarts, signal=task.signal,
                          final=task.final).to_json()

    def supervisor_state(self, run: ScriptedRun) -> dict[str, Any] | None:
        if run.supervisor_pid is None:
            return None
        return {"kind": "supervisor", "host": self.name, "pid": run.supervisor_pid, "state": run.supervisor_state,
                "run_id": run.run_id, "updated_at": time.time()}

    def state_lines(self, run: ScriptedRun) -> list[str]:
        sup = self.supervisor_state(run)
        states = ([sup] if sup else []) + [self.task_state(t) for t in run.tasks.values()]
        return [json.dumps(s) for s in states]

    def processes(self, run: ScriptedRun) -> list[str]:
        """The run's live processes as sh_procs.py's `describe` prints them."""
        out = []
        if run.supervisor_alive and run.supervisor_pid is not None:
            out.append(f"{run.supervisor_pid} {run.supervisor_pid} - supervisor")
        for t in run.tasks.values():
            if t.alive and t.pid is not None and run.supervisor_alive:
                out.append(f"{t.pid} {run.supervisor_pid} {t.name}#{t.restarts} task {t.name}")
        if run.leftover is not None:
            out.append(f"{run.leftover} {run.leftover} - stubborn leftover")
        return out

    def prepare(self, workdir: str, run_id: str, host: str, tree: str, run_json: bytes) -> tuple[str, bool]:
        """The launcher's first step: (the host's run dir, whether the code is in place: the host had the tree)."""
        root = f"{self.path(workdir)}/runs/{run_id}/{host}"
        self.make_run_dir(root)
        placed = self.place_code(root, tree)
        self.write_run_file(root, run_json)
        return root, placed

    def read(self, root: str) -> str:
        """What orchestrator/run/read_host.py's script prints: the state files, then whether the
        supervisor lives (and, when it does not, the run's processes)."""
        with self.lock:
            out = [f"@@tfc now {time.time():.6f}"]
            run = self.runs.get(root)
            if run is None or not run.code:
                return "\n".join([*out, "@@tfc absent", ""])
            sup = self.supervisor_state(run)
            states = ([("supervisor-" + self.name, sup)] if sup else []) + \
                [(t.name, self.task_state(t)) for t in run.tasks.values()]
            out.append("==> /dev/null <==")
            for stem, data in states:
                out += ["", f"==> state/{stem}.json <==", json.dumps(data)]
            if run.supervisor_alive:
                out.append(f"@@tfc alive {run.supervisor_pid}")
            else:
                out.append(f"@@tfc dead {run.supervisor_pid or '-'}")
                out += [f"@@tfc proc {p}" for p in self.processes(run)]
            return "\n".join([*out, ""])

    def stop(self, root: str, purge: bool) -> str:
        """What orchestrator/run/sh_stop.py's script prints: TERM the supervisor, KILL what is left (a
        stubborn host keeps one process alive), a fresh look, the run dir gone (`purge`) if clean."""
        with self.lock:
            run = self.runs.get(root)
            if run is None or not run.code:
                if purge:
                    self.runs.pop(root, None)
                return "ABSENT\n"
            out = [f"TERMINATED {run.supervisor_pid}"] if run.supervisor_alive and run.supervisor_pid else []
            out += [f"KILLED {p.split()[0]}" for p in self.processes(run)]
            for task in run.tasks.values():
                if task.alive:
                    self._exit(task, None, 15)
            if run.supervisor_pid is not None:
                run.supervisor_state = "stopped" if run.supervisor_alive else run.supervisor_state
            run.supervisor_alive = False
            if self.stubborn and run.leftover is None:
                run.leftover = next(_pids)
            left = self.processes(run)
            out += [f"LEFT {p}" for p in left]
            if purge and not left:
                self.runs.pop(root, None)
                out.append("PURGED")
            return "\n".join([*out, ""])

    def signal_pid(self, run_dir: str, pid: int, sig: str) -> bool:
        """`kill -s SIG pid` of a process of the run in `run_dir`: a task killed by TERM or KILL is restarted
        by its supervisor (on-failure)."""
        with self.lock:
            run = self.runs.get(run_dir)
            if run is None:
                return False
            for task in run.tasks.values():
                if task.pid == pid and task.alive and run.supervisor_alive:
                    if sig in ("TERM", "KILL"):
                        task.restarts += 1
                        self._spawn(task)
                    return True
            return False

    def log_lines(self, path: str) -> list[str] | None:
        with self.lock:
            for run in self.runs.values():
                for task in run.tasks.values():
                    if path == f"{run.root}/logs/{task.name}.log":
                        return run.logs.get(task.name, [f"hello from {task.job}:{task.index}"])
            return None

    def tail(self, paths: list[str], headers: bool) -> tuple[str, str]:
        """`tail -n N -- /dev/null PATH...` (headers): (stdout with a header before each file, stderr);
        `tail -n N PATH`: that file's lines only."""
        if not headers:
            log = self.log_lines(paths[0])
            if log is None:
                return "", f"tail: cannot open '{paths[0]}' for reading: No such file or directory"
            return "".join(line + "\n" for line in log), ""
        out, err = ["==> /dev/null <=="], []
        for path in paths:
            log = self.log_lines(path)
            if log is None:
                err.append(f"tail: cannot open '{path}' for reading: No such file or directory")
            else:
                out += ["", f"==> {path} <==", *log]
        return "\n".join([*out, ""]), "\n".join(err)

    def check_report(self, ports: list[int], workdir: str) -> dict[str, Any]:
        return {"python_version": "3.11.7", "tf_found": bool(self.tf_version), "tf_version": self.tf_version,
                "gpus": 0, "ports": {str(p): ("in use" if p in self.busy_ports else None) for p in ports},
                "disk_free_bytes": 50 << 30, "workdir": workdir, "workdir_writable": True}
