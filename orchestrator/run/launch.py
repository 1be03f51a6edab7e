"""`start`: turn a plan into running processes on every host, in parallel, in two phases.

1. prepare (every host at once): connect, create the run dir, ship code by content hash, write run.json;
2. only if every host is prepared (or `allow_partial`): launch each host's supervisor detached and
   wait until every task reports `running`.
A failure in phase 1 therefore starts nothing anywhere; a failure in phase 2 (or Ctrl-C at any point)
stops what was started before the error is raised. The run record is saved before anything runs on a
host, so `status`/`stop` find the run even if this process dies half-way.

No UI here: progress is reported through a callback `(host, phase, done, total)`.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from orchestrator.errors import HostError, TfclusterError, UsageError
from orchestrator.plan.model import ClusterPlan, HostPlan
from orchestrator.run import records
from orchestrator.run.remote import TRANSIENT_REASONS, RemoteRun, StateFiles, with_retry
from orchestrator.run.ship import (
    CACHE_DIR,
    TREES_DIR,
    ShipFile,
    list_cache_command,
    ship,
    sync_files,
    training_package_files,
    tree_id,
)
from orchestrator.run.stop import HostStop, stop_hosts
from orchestrator.transport.base import remote_path
from orchestrator.transport.factory import Opener, transport_for
from orchestrator.transport.fan_out import fan_out
from training.layout import RUN_FILE, RunLayout
from training.telemetry.state_files import TaskStateFile

ProgressFn = Callable[[str, str, int, int], None]  # host, phase, done, total
T = TypeVar("T")
WARM_MARK = "TFCLUSTER-CODE-TREE-READY"
PHASES = ("connect", "prepare", "ship", "launch", "wait", "running", "failed", "cancelled")


class StartInterrupted(TfclusterError):
    """Ctrl-C during start: what was started has been stopped again."""

    exit_code = 130


@dataclass
class StartOptions:
    timeout: float = 120.0  # the whole start, every host, until every task is running
    op_timeout: float = 30.0  # one remote command
    allow_partial: bool = False
    run_name: str | None = None
    supervisor: dict[str, float] = field(default_factory=dict)  # backoff_initial, backoff_max, grace, poll
    stop_grace: float = 10.0


@dataclass
class HostOutcome:
    host: str
    ok: bool = False
    error: HostError | None = None
    uploaded: int = 0
    shipped: int = 0
    supervisor_pid: int | None = None
    seconds: float = 0.0


@dataclass
class StartResult:
    record: records.RunRecord
    outcomes: dict[str, HostOutcome]
    seconds: float


class _Starter:
    def __init__(self, plan: ClusterPlan, record: records.RunRecord, files: list[ShipFile], run_json: bytes,
                 options: StartOptions, progress: ProgressFn | None,
                 opener: Opener) -> None:
        self.plan = plan
        self.record = record
        self.files = files
        self.tree = tree_id(files)
        self.run_json = run_json
        self.options = options
        self.progress = progress or (lambda host, phase, done, total: None)
        self.opener = opener
        self.deadline = time.monotonic() + options.timeout
        self.cancel = threading.Event()
        self.lock = threading.Lock()
        self.remotes: dict[str, RemoteRun] = {}
        self.outcomes = {h.name: HostOutcome(h.name) for h in plan.hosts}

    def _left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise HostError("?", "timeout", "start timed out")
        return min(self.options.op_timeout, left)

    def _check(self, host: str) -> None:
        if self.cancel.is_set():
            raise HostError(host, "cancelled", "start was cancelled")
        if time.monotonic() > self.deadline:
            raise HostError(host, "timeout", f"not ready within {self.options.timeout:g}s")

    def _retrying(self, host: HostPlan, remote: RemoteRun, fn: Callable[[], T]) -> T:
        """fn() with retries on a lost connection or a timeout (reconnecting), within the start's
        deadline; every step it retries is idempotent on the host."""

        def attempt() -> T:
            self._check(host.name)
            try:
                return fn()
            except HostError as exc:
                if exc.reason in TRANSIENT_REASONS:
                    remote.close()  # the next attempt reconnects
                raise

        return with_retry(host.name, attempt, self.deadline)

    # phase 1
    def prepare(self, host: HostPlan) -> None:
        t0 = time.monotonic()
        out = self.outcomes[host.name]
        self.progress(host.name, "connect", 0, 1)
        remote = RemoteRun(host, "", self.opener)  # its run dir is known after the first answer
        self.remotes[host.name] = remote
        self._check(host.name)
        self.progress(host.name, "prepare", 0, 1)
        run_rel = f"runs/{self.record.run_id}"
        dirs = " ".join(shlex.quote(f"{run_rel}/{d}") for d in ("code", "events", "logs", "state"))
        # One round trip: the run dir and the absolute workdir; then, when this host already has the
        # exact code tree (a warm start), the run's code/ and run.json too; else the cache listing.
        # `cp -f`: a retry after a lost connection finds the links of the first attempt.
        tree = shlex.quote(f"{CACHE_DIR}/{TREES_DIR}/{self.tree}")
        code, run_file = shlex.quote(f"{run_rel}/code"), shlex.quote(f"{run_rel}/{RUN_FILE}")
        script = (
            f"mkdir -p {remote_path(host.workdir)} && cd {remote_path(host.workdir)} && mkdir -p {dirs} && pwd && "
            f"if [ -d {tree} ]; then cp -alf {tree}/. {code}/ && cat > {run_file}.tmp && "
            f"mv -f {run_file}.tmp {run_file} && echo {WARM_MARK}; else {list_cache_command('.')}; fi"
        )
        result = self._retrying(host, remote, lambda: remote.run_shell(script, self._left(), stdin=self.run_json))
        result.check("prepare", f"cannot create the run dir in {host.workdir}")
        workdir, *listing = result.stdout.strip().splitlines()
        layout = RunLayout.for_run(workdir, self.record.run_id)
        remote.layout = layout
        self.record.host(host.name).run_dir = layout.root  # saved once, when the phase ends
        self._check(host.name)
        if listing == [WARM_MARK]:
            out.uploaded = 0
            self.progress(host.name, "ship", 0, 0)
        else:
            out.uploaded = self._retrying(host, remote, lambda: ship(
                remote.transport, self.files, workdir, layout.code, timeout=self._left(), have=set(listing),
                write_file=(layout.run_file, self.run_json), python=host.python,
                progress=lambda done, total: self.progress(host.name, "ship", done, total),
                cancelled=self.cancel.is_set,
            ))
        out.shipped = len(self.files)
        out.seconds = time.monotonic() - t0

    # phase 2
    def launch(self, host: HostPlan) -> None:
        t0 = time.monotonic()
        out = self.outcomes[host.name]
        remote = self.remotes[host.name]
        self._check(host.name)
        self.progress(host.name, "launch", 0, 1)
        # `started` was saved for every host before this phase began (see `start`). A retried launch
        # reports the supervisor the first attempt started (its lock on the host), never a second one.
        out.supervisor_pid, states, alive = self._retrying(host, remote, lambda: remote.launch_supervisor(self._left()))
        self.record.host(host.name).supervisor_pid = out.supervisor_pid
        names = set(host.tasks)
        delay = 0.05
        while True:
            ready = self._ready(host, names, states)
            self.progress(host.name, "wait", ready, len(names))
            if ready == len(names):
                break
            if out.supervisor_pid and not alive:
                raise HostError(host.name, "supervisor", "the supervisor exited before its tasks ran "
                                f"(see {remote.layout.logs}/supervisor-{host.name}.log)")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)
            states, alive = self._retrying(host, remote, lambda: remote.read_states(out.supervisor_pid, self._left()))
        out.ok = True
        out.seconds += time.monotonic() - t0
        self.progress(host.name, "running", len(names), len(names))

    def _ready(self, host: HostPlan, names: set[str], states: StateFiles) -> int:
        """How many of the host's tasks are running (or already done with exit 0); a task that failed
        for good fails the host."""
        tasks = {t.name: t for t in states if isinstance(t, TaskStateFile)}
        ready = 0
        for name in names:
            t = tasks.get(name)
            if t is None:
                continue
            if t.final and t.exit_code != 0:
                how = f"exit code {t.exit_code}" if t.exit_code is not None else f"signal {t.signal}"
                raise HostError(host.name, "task-failed",
                                f"{name} exited with {how} (see `tfcluster logs {self.record.run_id} "
                                f"{name.replace('-', ':')}`)")
            if t.state == "running" or (t.final and t.exit_code == 0):
                ready += 1
        return ready

    def run_phase(self, fn: Callable[[HostPlan], None], hosts: list[HostPlan]) -> None:
        """fn on every host at once; a host's failure is recorded in its outcome and, unless partial
        starts are allowed, cancels the others (they stop waiting: this start fails anyway)."""
        by_name = {h.name: h for h in hosts}

        def done(name: str, result: HostError | None) -> None:
            if not isinstance(result, HostError):
                return
            error = HostError(name, result.reason, result.detail) if result.host == "?" else result
            self.outcomes[name].error = error
            self.outcomes[name].ok = False
            self.progress(name, "cancelled" if error.reason == "cancelled" else "failed", 0, 1)
            if not self.options.allow_partial:
                self.cancel.set()

        fan_out(list(by_name), lambda name: fn(by_name[name]), on_done=done, on_interrupt=self.cancel.set,
                interrupt_grace=self.options.op_timeout, thread_name="tfcluster-start")

    def close(self) -> None:
        for remote in self.remotes.values():
            remote.close()


def _first_error(starter: _Starter, hosts: list[HostPlan]) -> HostError | None:
    """The root cause: a host's own error rather than another host's `cancelled`."""
    errors = [starter.outcomes[h.name].error for h in hosts if starter.outcomes[h.name].error is not None]
    real = [e for e in errors if e is not None and e.reason != "cancelled"]
    return (real or errors or [None])[0]


def start(
    plan: ClusterPlan,
    config_path: str,
    options: StartOptions | None = None,
    progress: ProgressFn | None = None,
    opener: Opener = transport_for,
) -> StartResult:
    """Start `plan` (orchestrator.plan.from_file.plan_file of `config_path`, whose directory the
    user's `[training] sync` paths are relative to)."""
    options = options or StartOptions()
    t0 = time.monotonic()
    base_dir = os.path.dirname(os.path.abspath(config_path))
    files = training_package_files() + sync_files(plan.training.sync, base_dir, config_path)
    run_id = records.new_run_id(plan.cluster_name, options.run_name)
    if records.exists(run_id):
        raise UsageError(f"run {run_id!r} already exists (stop/purge it or pick another --run name)")
    created = time.time()
    record = records.RunRecord(
        run_id=run_id, config_path=os.path.abspath(config_path), cluster=plan.cluster_name, mode=plan.mode,
        created=created, plan=plan,
        hosts=[records.HostRecord(name=h.name, workdir=h.workdir, python=h.python) for h in plan.hosts],
        start_pid=os.getpid(), start_machine=socket.gethostname(),
    )
    records.save(record)
    # The supervisors sign their peer messages with a key of the run's own (training/supervisor/peers.py):
    # in the hosts' run.json (0600) only, never in the local record.
    run_data: dict[str, Any] = {"run_id": run_id, "created": created, "plan": plan.to_json(),
                                "supervisor": {"grace": options.stop_grace, **options.supervisor},
                                "channel_key": secrets.token_hex(32)}
    run_json = json.dumps(run_data).encode()
    starter = _Starter(plan, record, files, run_json, options, progress, opener)
    hosts = list(plan.hosts)
    # The record is saved at phase boundaries, not per host: it holds the whole plan, so per-host saves
    # would cost O(hosts^2). Crash safety needs only that `started` is on disk before any launch.
    try:
        try:
            starter.run_phase(starter.prepare, hosts)
        finally:
            records.save(record)  # every prepared host's run dir, so a later stop --purge finds them
        prepared = [h for h in hosts if starter.outcomes[h.name].error is None]
        if len(prepared) == len(hosts) or (options.allow_partial and prepared):
            for h in prepared:
                record.host(h.name).started = True  # stop must visit it, even if we die mid-launch
            records.save(record)
            try:
                starter.run_phase(starter.launch, prepared)
            finally:
                records.save(record)  # supervisor pids
    except KeyboardInterrupt:
        rollback = _roll_back(starter, options)
        record.status = "interrupted"
        record.notes.append("start interrupted by the user")
        records.save(record)
        raise StartInterrupted("interrupted: start cancelled; " + rollback) from None
    finally:
        starter.close()
    failed = [h for h in hosts if starter.outcomes[h.name].error is not None]
    if failed and not (options.allow_partial and len(failed) < len(hosts)):
        error = _first_error(starter, failed)
        assert error is not None
        rollback = _roll_back(starter, options)
        record.status = "failed-to-start"
        record.notes.append(error.one_line())
        records.save(record)
        raise HostError(error.host, error.reason, f"{error.detail or 'failed'} ({rollback})")
    record.status = "partial" if failed else "started"
    for h in failed:
        record.notes.append(f"not started: {starter.outcomes[h.name].error}")
    records.save(record)
    return StartResult(record=record, outcomes=starter.outcomes, seconds=time.monotonic() - t0)


def _roll_back(starter: _Starter, options: StartOptions) -> str:
    """Stop the run on every host where its supervisor was (maybe) launched, and say what the stop's
    own verification saw: a rollback never claims a host is clean without having looked."""
    started = [h.name for h in starter.record.hosts if h.started]
    if not started:
        return "nothing was started"
    result = stop_hosts(starter.record, started, grace=min(options.stop_grace, 5.0), timeout=options.op_timeout,
                        opener=starter.opener)
    clean = [name for name in started if result.get(name, HostStop(name, ok=False)).ok]
    unverified = [name for name in started if name not in clean]
    with starter.lock:
        if not unverified:
            starter.record.status = "stopped"
        records.save(starter.record)
    said = f"stopped what was started on {', '.join(clean)}, verified: nothing of it is left running" if clean else ""
    if unverified:
        why = "; ".join(f"{n}: {result[n].error or 'processes left'}" if n in result else f"{n}: not reached"
                        for n in unverified)
        said += ("; " if said else "") + f"COULD NOT VERIFY the stop on {', '.join(unverified)} ({why}): " \
            f"run `tfcluster stop {starter.record.run_id}`"
    return said
