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
import shlex
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import Any, TypeVar

from orchestrator.config.load import plan_config
from orchestrator.config.schema import Config
from orchestrator.errors import HostError, TfclusterError
from orchestrator.plan.build import ClusterPlan, HostPlan
from orchestrator.run import records as runs
from orchestrator.run.lifecycle import stop_hosts
from orchestrator.run.remote import TRANSIENT_REASONS, RemoteRun, open_transport, with_retry
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
from orchestrator.transport.base import Transport, remote_path
from training.layout import RUN_FILE, RunLayout

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
    mode: str | None = None  # overrides [cluster] mode
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
    record: runs.RunRecord
    outcomes: dict[str, HostOutcome]
    seconds: float


def plan_for(config: Config, mode: str | None, source: str) -> ClusterPlan:
    if mode is not None and mode != config.cluster.mode:
        config = config.model_copy(update={"cluster": config.cluster.model_copy(update={"mode": mode})})
    return plan_config(config, source)


class _Starter:
    def __init__(self, plan: ClusterPlan, record: runs.RunRecord, files: list[ShipFile], run_json: bytes,
                 options: StartOptions, progress: ProgressFn | None,
                 opener: Callable[[HostPlan], Transport]) -> None:
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
        if not result.ok:
            raise HostError(host.name, "prepare", f"cannot create the run dir in {host.workdir}: "
                            f"{result.stderr.strip()[-200:]}")
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

    def _ready(self, host: HostPlan, names: set[str], states: list[dict[str, Any]]) -> int:
        """How many of the host's tasks are running (or already done with exit 0); a task that failed
        for good fails the host."""
        tasks = {f"{t['job']}-{t['task']}": t for t in states if t.get("kind") == "task"}
        ready = 0
        for name in names:
            t = tasks.get(name)
            if t is None:
                continue
            if t.get("final") and t.get("exit_code") != 0:
                code = t.get("exit_code")
                how = f"exit code {code}" if code is not None else f"signal {t.get('signal')}"
                raise HostError(host.name, "task-failed",
                                f"{name} exited with {how} (see `tfcluster logs {self.record.run_id} "
                                f"{name.replace('-', ':')}`)")
            if t.get("state") == "running" or (t.get("final") and t.get("exit_code") == 0):
                ready += 1
        return ready

    def run_phase(self, fn: Callable[[HostPlan], None], hosts: list[HostPlan]) -> None:
        if not hosts:
            return
        pool = ThreadPoolExecutor(max_workers=min(64, len(hosts)), thread_name_prefix="tfcluster-start")
        futures: dict[Future[None], HostPlan] = {pool.submit(self._guard, fn, h): h for h in hosts}
        try:
            pending = set(futures)
            while pending:
                # A timeout so that Ctrl-C reaches this (main) thread promptly.
                _, pending = wait_futures(pending, timeout=0.2)
        except KeyboardInterrupt:
            self.cancel.set()
            wait_futures(futures, timeout=self.options.op_timeout)
            raise
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def _guard(self, fn: Callable[[HostPlan], None], host: HostPlan) -> None:
        try:
            fn(host)
        except HostError as exc:
            if exc.host == "?":
                exc = HostError(host.name, exc.reason, exc.detail)
            self.outcomes[host.name].error = exc
            self.outcomes[host.name].ok = False
            self.progress(host.name, "cancelled" if exc.reason == "cancelled" else "failed", 0, 1)
            if not self.options.allow_partial:
                self.cancel.set()  # the others stop waiting: this start fails anyway
        except Exception as exc:  # noqa: BLE001 - any fault on one host is that host's error, not a crash
            self.outcomes[host.name].error = HostError(host.name, "error", f"{type(exc).__name__}: {exc}")
            self.progress(host.name, "failed", 0, 1)
            if not self.options.allow_partial:
                self.cancel.set()

    def close(self) -> None:
        for remote in self.remotes.values():
            remote.close()


def _first_error(starter: _Starter, hosts: list[HostPlan]) -> HostError | None:
    """The root cause: a host's own error rather than another host's `cancelled`."""
    errors = [starter.outcomes[h.name].error for h in hosts if starter.outcomes[h.name].error is not None]
    real = [e for e in errors if e is not None and e.reason != "cancelled"]
    return (real or errors or [None])[0]


def start(
    config: Config,
    config_path: str,
    options: StartOptions | None = None,
    progress: ProgressFn | None = None,
    opener: Callable[[HostPlan], Transport] = open_transport,
) -> StartResult:
    options = options or StartOptions()
    t0 = time.monotonic()
    plan = plan_for(config, options.mode, config_path)
    base_dir = os.path.dirname(os.path.abspath(config_path))
    files = training_package_files() + sync_files(config.training.sync, base_dir, config_path)
    run_id = runs.new_run_id(plan.cluster_name, options.run_name)
    if runs.exists(run_id):
        from orchestrator.errors import UsageError

        raise UsageError(f"run {run_id!r} already exists (stop/purge it or pick another --run name)")
    created = time.time()
    plan_json = plan.to_json()
    record = runs.RunRecord(
        run_id=run_id, config_path=os.path.abspath(config_path), cluster=plan.cluster_name, mode=plan.mode,
        created=created, plan=plan_json,
        hosts=[runs.HostRecord(name=h.name, workdir=h.workdir, python=h.python) for h in plan.hosts],
    )
    runs.save(record)
    run_data: dict[str, Any] = {"run_id": run_id, "created": created, "plan": plan_json,
                                "supervisor": {"grace": options.stop_grace, **options.supervisor}}
    run_json = json.dumps(run_data).encode()
    starter = _Starter(plan, record, files, run_json, options, progress, opener)
    hosts = list(plan.hosts)
    # The record is saved at phase boundaries, not per host: it holds the whole plan, so per-host saves
    # would cost O(hosts^2). Crash safety needs only that `started` is on disk before any launch.
    try:
        try:
            starter.run_phase(starter.prepare, hosts)
        finally:
            runs.save(record)  # every prepared host's run dir, so a later stop --purge finds them
        prepared = [h for h in hosts if starter.outcomes[h.name].error is None]
        if len(prepared) == len(hosts) or (options.allow_partial and prepared):
            for h in prepared:
                record.host(h.name).started = True  # stop must visit it, even if we die mid-launch
            runs.save(record)
            try:
                starter.run_phase(starter.launch, prepared)
            finally:
                runs.save(record)  # supervisor pids
    except KeyboardInterrupt:
        stopped = _roll_back(starter, options)
        record.status = "interrupted"
        record.notes.append("start interrupted by the user")
        runs.save(record)
        raise StartInterrupted(
            "interrupted: start cancelled; " + (f"stopped the run on {', '.join(stopped)}, " if stopped else "")
            + "nothing of it is left running") from None
    finally:
        starter.close()
    failed = [h for h in hosts if starter.outcomes[h.name].error is not None]
    if failed and not (options.allow_partial and len(failed) < len(hosts)):
        error = _first_error(starter, failed)
        assert error is not None
        stopped = _roll_back(starter, options)
        record.status = "failed-to-start"
        record.notes.append(error.one_line())
        runs.save(record)
        tail = f" (stopped what was started on {', '.join(stopped)})" if stopped else " (nothing was started)"
        raise HostError(error.host, error.reason, (error.detail or "failed") + tail)
    record.status = "partial" if failed else "started"
    for h in failed:
        record.notes.append(f"not started: {starter.outcomes[h.name].error}")
    runs.save(record)
    return StartResult(record=record, outcomes=starter.outcomes, seconds=time.monotonic() - t0)


def _roll_back(starter: _Starter, options: StartOptions) -> list[str]:
    """Stop the run on every host where its supervisor was (maybe) launched; names of those hosts."""
    started = [h.name for h in starter.record.hosts if h.started]
    if started:
        stop_hosts(starter.record, started, grace=min(options.stop_grace, 5.0), timeout=options.op_timeout,
                   opener=starter.opener)
        with starter.lock:
            starter.record.status = "stopped"
            runs.save(starter.record)
    return started
