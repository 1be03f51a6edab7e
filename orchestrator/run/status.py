"""`status`: every task's state, restarts and pid, and each host's supervisor, from one probe per host.

A probe is `training.supervisor --probe` (the state files the supervisor keeps plus the run's live
processes, found by their environment marker), decoded by training/telemetry/state_files.py. A state
file that says running while its pid is gone is `lost` (the supervisor was killed); a host that cannot
be reached makes its tasks `unreachable`, never "running" or "stopped".
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Literal

from orchestrator.errors import HostError
from orchestrator.plan.model import TaskPlan
from orchestrator.run import records
from orchestrator.run.remote import RemoteRun, with_retry
from orchestrator.transport.factory import Opener, transport_for
from orchestrator.transport.fan_out import fan_out
from training.telemetry.state_files import ProbeReport, SupervisorStateFile

RunState = Literal["running", "finished", "failed", "stopped", "partial"]
TaskStatusWord = Literal["starting", "running", "restarting", "exited", "unreachable", "not-started", "lost"]
RUN_STATES: tuple[RunState, ...] = ("running", "finished", "failed", "stopped", "partial")


@dataclass
class TaskStatus:
    job: str
    index: int
    host: str
    state: TaskStatusWord
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
    state: RunState
    tasks: list[TaskStatus]
    hosts: list[HostStatus]

    @property
    def failed(self) -> bool:
        return any(t.failed for t in self.tasks)

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "state": self.state, "failed": self.failed,
                "tasks": [{**asdict(t), "name": t.name} for t in self.tasks],
                "hosts": [asdict(h) for h in self.hosts]}


def _task_status(planned: TaskPlan, seen: ProbeReport | HostError | None) -> TaskStatus:
    ts = TaskStatus(job=planned.job, index=planned.index, host=planned.host, state="not-started")
    if isinstance(seen, HostError):
        ts.state = "unreachable"
        return ts
    if seen is None:
        return ts
    data = next((t for t in seen.tasks if t.job == ts.job and t.task == ts.index), None)
    if data is None:
        return ts
    ts.state = data.state
    ts.pid, ts.restarts = data.pid, data.restarts
    ts.exit_code, ts.signal = data.exit_code, data.signal
    ts.final, ts.updated_at = data.final, data.updated_at
    sup = seen.supervisor
    stopped = sup is not None and sup.state == "stopped"
    ts.failed = ts.final and ts.exit_code != 0 and not stopped
    if ts.state in ("running", "starting") and ts.pid not in {p.pid for p in seen.processes}:
        ts.state = "lost"  # the state file says running but the process is gone (supervisor killed?)
    return ts


def _host_status(name: str, seen: ProbeReport | HostError | None) -> HostStatus:
    if seen is None:
        return HostStatus(name, reachable=True, error="never prepared")
    if isinstance(seen, HostError):
        return HostStatus(name, reachable=False, error=seen.one_line())
    sup: SupervisorStateFile | None = seen.supervisor
    return HostStatus(
        name, reachable=True, supervisor=sup.state if sup else None, supervisor_alive=bool(sup and sup.alive),
        supervisor_pid=sup.pid if sup else None, processes=len(seen.processes),
        error="run dir absent" if seen.absent else None,
    )


def status(record: records.RunRecord, *, timeout: float = 15.0, opener: Opener = transport_for) -> RunStatus:
    names = [h.name for h in record.hosts if h.run_dir]
    plan_hosts = {h.name: h for h in record.plan.hosts}
    run_dirs = {h.name: h.run_dir for h in record.hosts}

    def one(name: str) -> ProbeReport:
        remote = RemoteRun(plan_hosts[name], run_dirs[name], opener)
        try:
            return with_retry(name, lambda: remote.probe(timeout), time.monotonic() + timeout)
        finally:
            remote.close()

    probes = fan_out(names, one, shardable=True)
    hosts = [_host_status(h.name, probes.get(h.name)) for h in record.hosts]
    tasks = [_task_status(t, probes.get(t.host)) for t in record.plan.tasks]
    return RunStatus(record.run_id, _run_state(record, tasks, hosts), tasks, hosts)


def _run_state(record: records.RunRecord, tasks: list[TaskStatus], hosts: list[HostStatus]) -> RunState:
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
    if record.status == "partial" or any(t.state in ("not-started", "lost", "unreachable") for t in tasks):
        return "partial"
    return "running"
