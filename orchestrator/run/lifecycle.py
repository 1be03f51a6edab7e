"""A started run's life: `status`, `stop` (+ purge) and `logs`, from the local run record alone.

Every host is visited in parallel; a host that cannot be reached is reported (`unreachable`), never
waited on past the command's timeout; transient connection losses are retried with backoff.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from orchestrator.errors import HostError, UsageError
from orchestrator.plan.build import HostPlan
from orchestrator.run import records as runs
from orchestrator.run.remote import RemoteRun, host_plan_from_json, open_transport, with_retry
from orchestrator.transport.base import Transport
from training.layout import RunLayout

Opener = Callable[[HostPlan], Transport]
T = TypeVar("T")
RUN_STATES = ("running", "finished", "failed", "stopped", "partial")


def _host_plans(record: runs.RunRecord) -> dict[str, HostPlan]:
    return {h["name"]: host_plan_from_json(h) for h in record.plan.get("hosts", [])}


def _parallel(names: list[str], fn: Callable[[str], T]) -> dict[str, T | HostError]:
    """fn(host) for every host at once; a HostError is that host's result, not the call's."""
    if not names:
        return {}

    def guard(name: str) -> T | HostError:
        try:
            return fn(name)
        except HostError as exc:
            return exc
        except Exception as exc:  # noqa: BLE001 - one host's fault must not hide the others' results
            return HostError(name, "error", f"{type(exc).__name__}: {exc}")

    with ThreadPoolExecutor(max_workers=min(64, len(names)), thread_name_prefix="tfcluster") as pool:
        return dict(zip(names, pool.map(guard, names), strict=True))


# ---- stop -------------------------------------------------------------------------------------------

@dataclass
class HostStop:
    host: str
    ok: bool
    absent: bool = False  # no run dir there (never prepared, or purged)
    killed: list[int] = field(default_factory=list)
    remaining: list[dict[str, Any]] = field(default_factory=list)  # from the verifying process listing
    purged: bool = False
    error: str | None = None


def stop_hosts(record: runs.RunRecord, names: Iterable[str], *, grace: float = 10.0, timeout: float = 30.0,
               purge: bool = False, opener: Opener = open_transport) -> dict[str, HostStop]:
    plans = _host_plans(record)
    targets = [n for n in names if record.host(n).run_dir]

    def one(name: str) -> HostStop:
        remote = RemoteRun(plans[name], record.host(name).run_dir, opener)
        deadline = time.monotonic() + timeout + grace
        try:
            result = with_retry(name, lambda: remote.stop(grace, timeout), deadline)
            if result.get("absent"):
                return HostStop(name, ok=True, absent=True)
            # Verify with a fresh process listing rather than trusting the stop's own report.
            seen = with_retry(name, lambda: remote.probe(timeout), deadline + timeout)
            remaining = list(seen.get("processes", []))
            purged = False
            if purge and not remaining:
                with_retry(name, lambda: remote.purge(timeout), deadline + timeout)
                purged = True
            return HostStop(name, ok=not remaining, killed=list(result.get("killed", [])),
                            remaining=remaining, purged=purged)
        finally:
            remote.close()

    out: dict[str, HostStop] = {}
    for name, res in _parallel(targets, one).items():
        out[name] = res if isinstance(res, HostStop) else HostStop(name, ok=False, error=res.one_line())
    return out


def stop(record: runs.RunRecord, *, grace: float = 10.0, timeout: float = 30.0, purge: bool = False,
         opener: Opener = open_transport) -> dict[str, HostStop]:
    """Stop the run everywhere, verify nothing of it remains; idempotent. Unreachable hosts are
    reported in the result (ok=False, error) and the record keeps saying where the run may live."""
    result = stop_hosts(record, [h.name for h in record.hosts], grace=grace, timeout=timeout, purge=purge,
                        opener=opener)
    if all(r.ok for r in result.values()):
        record.status = "purged" if purge else "stopped"
    runs.save(record)
    if purge and all(r.ok for r in result.values()):
        runs.remove(record.run_id)
    return result


# ---- status -----------------------------------------------------------------------------------------

@dataclass
class TaskStatus:
    job: str
    index: int
    host: str
    state: str  # starting | running | restarting | exited | unreachable | not-started | lost
    pid: int | None = None
    restarts: int = 0
    exit_code: int | None = None
    signal: int | None = None
    final: bool = False
    failed: bool = False  # exited for good with an error (not because the run was stopped)
    updated_at: float | None = None

    @property
    def name(self) -> str:
        return f"{self.job}:{self.index}"


@dataclass
class HostStatus:
    host: str
    reachable: bool
    error: str | None = None
    supervisor: str | None = None  # its last recorded state: starting | running | finished | failed | stopped
    supervisor_alive: bool = False
    supervisor_pid: int | None = None
    processes: int = 0  # live processes of the run on this host


@dataclass
class RunStatus:
    run_id: str
    state: str  # running | finished | failed | stopped | partial
    tasks: list[TaskStatus]
    hosts: list[HostStatus]

    @property
    def failed(self) -> bool:
        return any(t.failed for t in self.tasks)

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "state": self.state, "failed": self.failed,
                "tasks": [{**asdict(t), "name": t.name} for t in self.tasks],
                "hosts": [asdict(h) for h in self.hosts]}


def _task_status(plan_task: dict[str, Any], seen: dict[str, Any] | HostError, sup: dict[str, Any] | None,
                 live_pids: set[int]) -> TaskStatus:
    ts = TaskStatus(job=plan_task["job"], index=int(plan_task["index"]), host=plan_task["host"],
                    state="not-started")
    if isinstance(seen, HostError):
        ts.state = "unreachable"
        return ts
    data = next((t for t in seen.get("tasks", []) if t.get("job") == ts.job and t.get("task") == ts.index), None)
    if data is None:
        return ts
    ts.state = str(data.get("state"))
    ts.pid, ts.restarts = data.get("pid"), int(data.get("restarts") or 0)
    ts.exit_code, ts.signal = data.get("exit_code"), data.get("signal")
    ts.final, ts.updated_at = bool(data.get("final")), data.get("updated_at")
    stopped = sup is not None and sup.get("state") == "stopped"
    ts.failed = ts.final and ts.exit_code != 0 and not stopped
    if ts.state in ("running", "starting") and ts.pid not in live_pids:
        ts.state = "lost"  # the state file says running but the process is gone (supervisor killed?)
    return ts


def status(record: runs.RunRecord, *, timeout: float = 15.0, opener: Opener = open_transport) -> RunStatus:
    plans = _host_plans(record)
    names = [h.name for h in record.hosts if h.run_dir]

    def one(name: str) -> dict[str, Any]:
        remote = RemoteRun(plans[name], record.host(name).run_dir, opener)
        try:
            return with_retry(name, lambda: remote.probe(timeout), time.monotonic() + timeout)
        finally:
            remote.close()

    probes = _parallel(names, one)
    hosts: list[HostStatus] = []
    sups: dict[str, dict[str, Any] | None] = {}
    lives: dict[str, set[int]] = {}
    for h in record.hosts:
        seen = probes.get(h.name)
        if seen is None:
            hosts.append(HostStatus(h.name, reachable=True, error="never prepared"))
            sups[h.name] = None
            continue
        if isinstance(seen, HostError):
            hosts.append(HostStatus(h.name, reachable=False, error=seen.one_line()))
            sups[h.name] = None
            continue
        sup = next(iter(seen.get("supervisors", [])), None)
        sups[h.name] = sup
        lives[h.name] = {int(p["pid"]) for p in seen.get("processes", [])}
        hosts.append(HostStatus(
            h.name, reachable=True, supervisor=(sup or {}).get("state"),
            supervisor_alive=bool((sup or {}).get("alive")), supervisor_pid=(sup or {}).get("pid"),
            processes=len(seen.get("processes", [])), error="run dir absent" if seen.get("absent") else None,
        ))
    tasks = [
        _task_status(t, probes.get(t["host"]) or {}, sups.get(t["host"]), lives.get(t["host"], set()))
        for t in record.plan.get("tasks", [])
    ]
    return RunStatus(record.run_id, _run_state(record, tasks, hosts), tasks, hosts)


def _run_state(record: runs.RunRecord, tasks: list[TaskStatus], hosts: list[HostStatus]) -> str:
    if tasks and all(t.final and t.exit_code == 0 for t in tasks):
        return "finished"
    if any(t.failed for t in tasks):
        return "failed"
    if any(not h.reachable for h in hosts):
        return "partial"  # what runs there is unknown: never call such a run stopped or running
    alive = any(h.processes for h in hosts)
    if not alive and (record.status in ("stopped", "purged", "failed-to-start", "interrupted")
                      or any(h.supervisor == "stopped" for h in hosts)):
        return "stopped"
    if any(not h.reachable for h in hosts) or record.status == "partial" or \
            any(t.state in ("not-started", "lost", "unreachable") for t in tasks):
        return "partial"
    return "running"


# ---- logs -------------------------------------------------------------------------------------------

def select_tasks(record: runs.RunRecord, selectors: Iterable[str]) -> list[dict[str, Any]]:
    """`worker:1`, `worker-1`, `worker` (every worker), or `worker@m2`; none = every task."""
    tasks = list(record.plan.get("tasks", []))
    selectors = list(selectors)
    if not selectors:
        return tasks
    chosen: list[dict[str, Any]] = []
    for sel in selectors:
        spec, _, host = sel.partition("@")
        job, sep, index = spec.replace("-", ":").partition(":")
        matched = [t for t in tasks
                   if t["job"] == job and (not sep or str(t["index"]) == index) and (not host or t["host"] == host)]
        if not matched:
            known = ", ".join(f"{t['job']}:{t['index']}" for t in tasks)
            raise UsageError(f"no task {sel!r} in run {record.run_id} (tasks: {known})")
        chosen.extend(t for t in matched if t not in chosen)
    return chosen


def _prefix(task: dict[str, Any]) -> str:
    return f"{task['job']}:{task['index']}@{task['host']}"


def logs(record: runs.RunRecord, selectors: Iterable[str], emit: Callable[[str], None], *,
         follow: bool = False, lines: int | None = None, timeout: float = 15.0,
         stop_event: threading.Event | None = None, opener: Opener = open_transport) -> None:
    """Emit every chosen task's log lines prefixed `job:task@host`; with follow, keep streaming
    (reconnecting with backoff) until stop_event is set or KeyboardInterrupt."""
    chosen = select_tasks(record, selectors)
    plans = _host_plans(record)
    stop_event = stop_event or threading.Event()
    tail_from = "+1" if lines is None else str(lines)

    def path_of(task: dict[str, Any]) -> str:
        return RunLayout(record.host(task["host"]).run_dir).log_file(task["job"], int(task["index"]))

    if not follow:
        def read(host: str) -> list[tuple[dict[str, Any], list[str]]]:
            remote = RemoteRun(plans[host], record.host(host).run_dir, opener)
            try:
                out = []
                for task in (t for t in chosen if t["host"] == host):
                    argv = ["tail", "-n", tail_from, path_of(task)]
                    result = with_retry(host, lambda a=argv: remote.transport.run(a, timeout=timeout),  # type: ignore[misc]
                                        time.monotonic() + timeout)
                    out.append((task, result.stdout.splitlines() if result.ok else
                                [f"-- no log yet ({result.stderr.strip()[-120:]})"]))
                return out
            finally:
                remote.close()

        results = _parallel(sorted({t["host"] for t in chosen}), read)
        for host, res in results.items():
            if isinstance(res, HostError):
                emit(f"-- {host}: {res.one_line()}")
                continue
            for task, text in res:
                for line in text:
                    emit(f"{_prefix(task)} {line}")
        return

    q: queue.Queue[str] = queue.Queue()
    open_streams: list[Any] = []  # closed from here on exit: a blocked read then returns

    def follow_one(task: dict[str, Any]) -> None:
        host = task["host"]
        remote = RemoteRun(plans[host], record.host(host).run_dir, opener)
        first, delay = True, 0.2
        while not stop_event.is_set():
            try:
                argv = ["tail", "-n", tail_from if first else "0", "-F", path_of(task)]
                stream = remote.transport.stream(argv)
                open_streams.append(stream)
                first, delay = False, 0.2
                try:
                    for line in stream.lines():
                        if stop_event.is_set():
                            break
                        q.put(f"{_prefix(task)} {line.rstrip(chr(10))}")
                finally:
                    stream.close()
                if stop_event.is_set():
                    break
                q.put(f"-- {_prefix(task)}: stream ended, reconnecting")
            except HostError as exc:
                q.put(f"-- {_prefix(task)}: {exc.one_line()}; retrying in {delay:.1f}s")
                remote.close()
            stop_event.wait(delay)
            delay = min(delay * 2, 10.0)
        remote.close()

    threads = [threading.Thread(target=follow_one, args=(t,), daemon=True, name="tfcluster-logs") for t in chosen]
    for th in threads:
        th.start()
    try:
        while not stop_event.is_set():
            try:
                emit(q.get(timeout=0.2))
            except queue.Empty:
                continue
    finally:
        stop_event.set()
        for stream in list(open_streams):
            with contextlib.suppress(Exception):  # closing on the way out; the thread ends anyway
                stream.close()
        while not q.empty():
            emit(q.get_nowait())

