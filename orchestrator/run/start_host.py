"""One host's start: a conversation with training/launcher.py over ONE command (Transport.open_session).

Phase 1, `prepare()`: open the command, send the header and run.json; a host without this exact code
tree or package answers `@send`, gets the manifest, answers `@need <hashes>` and gets exactly those files,
streamed a chunk at a time (orchestrator.run.ship); the host says `@prepared <run dir>` (after `@ports ...`: which of the plan's ports are taken there, and free ones for
`--auto-ports`: orchestrator.run.port_check), and its command then waits at the barrier with its stdin open.
Phase 2, `launch()`: `go <seconds>` (after a `run` frame when the ports were re-planned, and an `env` frame
with the `forward_env` values, which no file ever holds); the host execs the supervisor's launcher (training/supervisor/
detach.py), which says `PID <pid>`, relays each state change the supervisor pushes until every task
runs, then the final state files and `ALIVE`. Readiness is pushed over this same command: no polling.
`release()`: no `go` (another host failed, or Ctrl-C): the host's command ends and nothing starts there.

So a host costs one SSH command (one login shell, one `python -S` up to the launch) per start, however
many exchanges. A lost connection or a timeout closes the command and its connection and the step is
tried again (run.remote.with_retry) within the start's deadline: every step is idempotent on the host,
and a launch retried after its `go` finds the supervisor the first attempt started (its lock).
`StartShard` runs a phase on many hosts at once (transport.fan_out): in this process, or in each of the
worker processes of run.start_shards.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.errors import HostError
from orchestrator.plan.model import HostPlan
from orchestrator.plan.names import task_name
from orchestrator.run.inline_source import standalone_source
from orchestrator.run.remote import RemoteRun, with_retry
from orchestrator.run.ship import FileSets, ShippedFileChanged, send_blob
from orchestrator.transport.base import Session, remote_path
from orchestrator.transport.factory import Opener
from orchestrator.transport.fan_out import fan_out
from training.run.layout import RUN_DIR_ENV, host_module
from training.telemetry.state_files import SupervisorStateFile, decode_state_line
from training.telemetry.task_record import TaskRecord
from training.telemetry.wire import StateFileError

ProgressFn = Callable[[str, str, int, int], None]  # host, phase, done, total
LAUNCHER_SOURCE = standalone_source("training.launcher")
WORKDIR_FAILED = 70  # the start command's exit code when it cannot create or enter the workdir
READ_SLICE_S = 0.25  # how often a waiting host looks at the cancel flag
END_GRACE_S = 1.0  # a launcher told to end (stdin closed) cleans up within this, or is killed
PREPARE_LIMIT, LAUNCH_LIMIT = 64, 256  # threads per process: handshakes are CPU, launches mostly waiting


@dataclass
class HostOutcome:
    host: str
    ok: bool = False
    error: HostError | None = None
    uploaded: int = 0  # files sent to it
    shipped: int = 0  # files it holds for the run
    ship_s: float = 0.0  # seconds spent sending them (not counted against start's timeout)
    supervisor_pid: int | None = None
    seconds: float = 0.0
    run_dir: str = ""  # absolute, as the host resolved it
    taken: list[tuple[str, int, str]] = field(default_factory=list)  # (task label, port, why) in use there
    free: list[int] = field(default_factory=list)  # free ports it offered (start --auto-ports)


@dataclass
class StartContext:
    """What every host's start shares (built once; worker processes inherit it)."""

    run_id: str
    run_file: Callable[[str], bytes]  # a host's run.json (run.run_file.RunFiles.for_host)
    files: FileSets
    op_timeout: float
    timeout: float
    deadline: float  # time.monotonic()
    allow_partial: bool
    progress: ProgressFn
    cancel: threading.Event = field(default_factory=threading.Event)
    # Ports each host tries to bind while it prepares: host -> [[label, address or "", port], ...]
    # (orchestrator.run.port_check); with `free_count`, it also offers that many free ports from `free_from`.
    host_ports: dict[str, list[list[object]]] = field(default_factory=dict)
    free_from: int = 0
    free_count: int = 0
    replanned: bool = False  # the ports were re-planned after prepare: each host gets its new run.json at `go`
    forward_env: dict[str, str] = field(default_factory=dict)  # [training] forward_env: sent at `go`, never stored
    head_extra: dict[str, dict[str, object]] = field(default_factory=dict)  # host -> more head fields (Slurm's hand-over)


def frame(name: str, data: bytes) -> bytes:
    return f"{name} {len(data)}\n".encode() + data


def start_command(host: HostPlan, run_id: str) -> str:
    """A private umask before anything is written, enter (or create) the workdir, set the run marker (the
    host's own run dir) for everything this command starts, and run the launcher under the host's python
    with -S (it is stdlib only)."""
    wd = remote_path(host.workdir)
    return (f"umask 077\ncd {wd} 2>/dev/null || {{ mkdir -p {wd} && cd {wd}; }} || exit {WORKDIR_FAILED}\n"
            f'{RUN_DIR_ENV}="$PWD"/runs/{shlex.quote(run_id)}/{shlex.quote(host.name)} '
            f"exec {remote_path(host.python)} -S -c {shlex.quote(LAUNCHER_SOURCE)}")


class HostStart:
    def __init__(self, host: HostPlan, ctx: StartContext, opener: Opener) -> None:
        self.host = host
        self.ctx = ctx
        self.remote = RemoteRun(host, "", opener)
        self.session: Session | None = None
        self.outcome = HostOutcome(host.name, shipped=len(ctx.files.tree) + len(ctx.files.package))
        self.said: list[str] = []  # the host's `@error` lines

    def progress(self, phase: str, done: int, total: int) -> None:
        self.ctx.progress(self.host.name, phase, done, total)

    # --- phase 1 -----------------------------------------------------------------------------------
    def prepare(self) -> None:
        started = time.monotonic()
        self.progress("connect", 0, 1)
        with_retry(self.host.name, self._prepare_once, self._deadline())
        self.outcome.seconds += time.monotonic() - started

    def _prepare_once(self) -> None:
        self._check_cancel()
        self.close()
        deadline = min(self._deadline(), time.monotonic() + self.ctx.op_timeout)
        try:
            session = self.session = self.remote.transport.open_session(start_command(self.host, self.ctx.run_id))
            self.progress("prepare", 0, 1)
            head: dict[str, object] = {"host": self.host.name, "tree": self.ctx.files.tree_id,
                                       "package": self.ctx.files.package_id, "supervisor": host_module("supervisor"),
                                       "python": self.host.python}
            if self.host.name in self.ctx.host_ports:
                head.update(ports=self.ctx.host_ports[self.host.name], free_from=self.ctx.free_from,
                            free_count=self.ctx.free_count)
            head.update(self.ctx.head_extra.get(self.host.name, {}))
            session.send(frame("head", json.dumps(head).encode()) + frame("run", self.ctx.run_file(self.host.name)))
            while True:
                line = self._read(session, deadline, "prepare")
                if line is None:
                    raise self._ended(session)
                if line == "@send":
                    session.send(frame("manifest", self.ctx.files.manifest))
                elif line.startswith("@need"):
                    self._ship(session, line.split()[1:])
                    deadline = min(self._deadline(), time.monotonic() + self.ctx.op_timeout)
                elif line.startswith("@ports "):
                    self._ports(line[len("@ports "):])
                elif line.startswith("@prepared "):
                    self.outcome.run_dir = line[len("@prepared "):]
                    return
                elif line.startswith("@error "):
                    self.said.append(line[len("@error "):])
        except HostError:
            self.end_unlaunched()
            raise

    def _ports(self, text: str) -> None:
        try:
            report = json.loads(text)
            self.outcome.taken = [(str(label), int(port), str(why)) for label, port, why in report["taken"]]
            self.outcome.free = [int(p) for p in report["free"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise HostError(self.host.name, "prepare", f"unreadable port report {text[:80]!r}: {exc}") from None

    def _ship(self, session: Session, need: list[str]) -> None:
        """The files the host lacks, one blob frame each, streamed; the time it takes extends this host's
        deadlines (the start's timeout is for the tasks to run, however long the files take to arrive)."""
        started = time.monotonic()
        by_hash = self.ctx.files.by_hash
        unknown = [sha for sha in need if sha not in by_hash]
        if unknown:
            raise HostError(self.host.name, "prepare", f"the host asked for a file this start does not ship: {unknown[0]}")
        self.progress("ship", 0, len(need))
        try:
            for done, sha in enumerate(need, 1):
                send_blob(by_hash[sha], session.send, self._check_cancel)
                self.outcome.ship_s = time.monotonic() - started
                self.progress("ship", done, len(need))
        except ShippedFileChanged as exc:
            raise HostError(self.host.name, "prepare", str(exc)) from None
        except HostError as exc:
            if exc.reason != "lost":
                raise
            # The command stopped reading: its own `@error` words say why (a full disk: "No space left on
            # device"), and they are final, no retry changes them. Without any, the connection broke.
            self.await_end(time.monotonic() + END_GRACE_S)
            raise (HostError(self.host.name, "ship", "; ".join(self.said)) if self.said else exc) from None
        self.outcome.uploaded = len(need)

    def _deadline(self) -> float:
        return self.ctx.deadline + self.outcome.ship_s

    def _ended(self, session: Session) -> HostError:
        """The command ended before saying what it must: why, from its exit code and its own words."""
        code = session.exit_code
        tail = (session.stderr_tail.strip() or "")[-300:]
        if self.said:
            return HostError(self.host.name, "prepare", "; ".join(self.said))
        if code == WORKDIR_FAILED:
            return HostError(self.host.name, "prepare", f"cannot create the run dir in {self.host.workdir}: {tail}")
        if code == 127:
            return HostError(self.host.name, "prepare", f"cannot run {self.host.python}: {tail}")
        return HostError(self.host.name, "prepare", f"the start command ended (exit {code})" + (f": {tail}" if tail else ""))

    # --- phase 2 -----------------------------------------------------------------------------------
    def launch(self) -> None:
        started = time.monotonic()
        with_retry(self.host.name, self._launch_once, self.ctx.deadline)
        self.outcome.ok = True
        self.outcome.seconds += time.monotonic() - started
        names = len(self.host.tasks)
        self.progress("running", names, names)

    def _launch_once(self) -> None:
        self._check_cancel()
        if self.session is None:  # the connection was lost at the barrier, or a launch is retried
            self._prepare_once()
        session = self.session
        assert session is not None
        left = self.ctx.deadline - time.monotonic()
        try:
            before = frame("run", self.ctx.run_file(self.host.name)) if self.ctx.replanned else b""
            if self.ctx.forward_env:  # the values live in the launcher's memory only (training/launcher.py)
                before += frame("env", json.dumps(self.ctx.forward_env).encode())
            session.send(before + f"go {max(1.0, left - 1.0):.1f}\n".encode())
            self.progress("launch", 0, 1)
            self._await_ready(session)
        except HostError:
            self.close()
            raise

    def _await_ready(self, session: Session) -> None:
        states: dict[str, TaskRecord] = {}
        alive = False
        names = set(self.host.tasks)
        while True:
            line = self._read(session, self.ctx.deadline, "launch")
            if line is None:
                break
            if line.startswith("PID ") and line[4:].strip().isdigit():
                self.outcome.supervisor_pid = int(line[4:])
            elif line.startswith("{"):
                state = self._decode(line)
                if isinstance(state, TaskRecord):
                    states[task_name(state.job, state.task)] = state
                    self.progress("wait", self._ready(names, states), len(names))
            elif line == "ALIVE":
                alive = True
            elif line.startswith("@error "):
                self.said.append(line[len("@error "):])
        if self._ready(names, states) == len(names):
            return
        if self.outcome.supervisor_pid is None:
            why = "; ".join(self.said) or session.stderr_tail.strip()[-300:]
            raise HostError(self.host.name, "launch", "the supervisor did not start" + (f": {why}" if why else ""))
        if not alive:
            raise HostError(self.host.name, "supervisor", "the supervisor exited before its tasks ran "
                            f"(see {self.outcome.run_dir}/logs/supervisor-{self.host.name}.log)")
        raise HostError(self.host.name, "timeout", f"tasks not running within {self.ctx.timeout:g}s")

    @staticmethod
    def _decode(line: str) -> TaskRecord | SupervisorStateFile | None:
        try:
            return decode_state_line(json.loads(line))
        except (ValueError, StateFileError):
            return None  # not ours, or damaged: the final snapshot says it again

    def _ready(self, names: set[str], states: dict[str, TaskRecord]) -> int:
        """How many of the host's tasks run (or already ended with exit 0); one that failed for good
        fails the host."""
        ready = 0
        for name in names:
            t = states.get(name)
            if t is None:
                continue
            if t.final and t.exit_code != 0 and t.stopped_by != "run":  # ended by the run: never its fault
                how = f"exit code {t.exit_code}" if t.exit_code is not None else f"signal {t.signal}"
                why = f": {t.error}" if t.error else ""
                raise HostError(self.host.name, "task-failed", f"{name} exited with {how}{why} "
                                f"(see `tfcluster logs {self.ctx.run_id} {name}`)")
            if t.state == "running" or (t.final and (t.exit_code == 0 or t.stopped_by == "run")):
                ready += 1  # a run that failed meanwhile is said by the host where it failed
        return ready

    # --- both --------------------------------------------------------------------------------------
    def _read(self, session: Session, deadline: float, step: str) -> str | None:
        """The next line, looking at the cancel flag between short waits."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise HostError(self.host.name, "timeout", f"no answer from the host within "
                                f"{self.ctx.op_timeout if step == 'prepare' else self.ctx.timeout:g}s ({step})")
            self._check_cancel()
            try:
                return session.read_line(min(READ_SLICE_S, left))
            except HostError as exc:
                if exc.reason != "timeout":
                    raise

    def _check_cancel(self) -> None:
        if self.ctx.cancel.is_set():
            self.end_unlaunched()
            raise HostError(self.host.name, "cancelled", "start was cancelled")
        if time.monotonic() > self._deadline():
            raise HostError(self.host.name, "timeout", f"not ready within {self.ctx.timeout:g}s")

    def end_unlaunched(self, grace: float = END_GRACE_S) -> None:
        """End a command that has launched nothing (a failure, a cancelled start, even in the middle of a
        file): its stdin ends, so the launcher removes what it made, then it is closed (killed if it
        still runs after `grace`)."""
        if self.session is not None:
            with contextlib.suppress(HostError):
                self.session.close_input()
        self.await_end(time.monotonic() + grace)

    def abort(self) -> None:
        """No `go` for this host: its command removes what it made (a start that does not happen leaves
        nothing, not even an empty directory) and ends; `await_end` waits for that."""
        if self.session is not None:
            with contextlib.suppress(HostError):
                self.session.send(b"abort\n")

    def await_end(self, deadline: float) -> None:
        """Until the command has ended (or the deadline), keeping its `@error` words, then close it."""
        if self.session is not None:
            with contextlib.suppress(HostError):
                while (line := self.session.read_line(max(0.05, deadline - time.monotonic()))) is not None:
                    self.said += [line[len("@error "):]] if line.startswith("@error ") else []
        self.close()

    def close(self) -> None:
        """End the host's command (killed if it still runs) and its connection."""
        session, self.session = self.session, None
        if session is not None:
            with contextlib.suppress(HostError):
                session.close()
        self.remote.close()


class StartShard:
    """The hosts one process starts, a phase at a time on all of them at once."""

    def __init__(self, ctx: StartContext, hosts: list[HostPlan], opener: Opener,
                 on_outcome: Callable[[HostOutcome], None] | None = None) -> None:
        self.ctx = ctx
        self.starts = {h.name: HostStart(h, ctx, opener) for h in hosts}
        self.outcomes = {name: s.outcome for name, s in self.starts.items()}
        self.on_outcome = on_outcome  # each host's outcome when its phase ends (shard workers send it up)

    def _phase(self, names: list[str], step: Callable[[HostStart], None], limit: int, *, cancel_on_failure: bool) -> None:
        def done(name: str, result: HostError | None) -> None:
            out = self.outcomes[name]
            if isinstance(result, HostError):
                out.error = HostError(name, result.reason, result.detail) if result.host != name else result
                out.ok = False
                self.ctx.progress(name, "cancelled" if out.error.reason == "cancelled" else "failed", 0, 1)
                if cancel_on_failure and not self.ctx.allow_partial:
                    self.ctx.cancel.set()  # this start fails anyway: the other hosts stop waiting
            if self.on_outcome is not None:
                self.on_outcome(out)

        fan_out(names, lambda name: step(self.starts[name]), limit=limit, on_done=done,
                on_interrupt=self.ctx.cancel.set, interrupt_grace=self.ctx.op_timeout, thread_name="tfcluster-start")

    def prepare(self) -> None:
        # Every host finishes its prepare even when one failed (nothing runs yet): the error then names
        # every host that cannot start, not only the first.
        self._phase(list(self.starts), HostStart.prepare, PREPARE_LIMIT, cancel_on_failure=False)

    def replan(self, run_file: Callable[[str], bytes]) -> None:
        """The ports were re-planned: each host's new run.json goes with its `go`."""
        self.ctx.run_file = run_file
        self.ctx.replanned = True

    def launch(self, names: list[str], extend: float = 0.0) -> None:
        """Launch these hosts (all prepared); release the others. `extend`: seconds added to the start's
        deadline (the time the slowest host spent receiving files)."""
        self.ctx.deadline += extend
        go = set(names)
        self.release([n for n in self.starts if n not in go])
        self._phase([n for n in self.starts if n in go], HostStart.launch, LAUNCH_LIMIT, cancel_on_failure=True)

    def release(self, names: list[str] | None = None) -> None:
        """These hosts (default: all) do not go: each removes what it prepared, all at once."""
        starts = [self.starts[name] for name in (self.starts if names is None else names)]
        for start in starts:
            start.abort()
        deadline = time.monotonic() + min(10.0, self.ctx.op_timeout)
        for start in starts:
            start.await_end(deadline)

    def close(self) -> None:
        for start in self.starts.values():
            start.close()
