"""`status`: every task's state, restarts and pid, and each host's supervisor, from one probe per host.

A probe is `training.supervisor --probe`: the state files the supervisor keeps, the run's live
processes (found by their environment marker), the host's facts (training/telemetry/host_facts.py) and
each task's newest progress line, decoded by training/telemetry/state_files.py. Each task's state is
then judged by the dashboard's own reducer (orchestrator/monitor), fed with what the probe saw: `status`
and `dash` never disagree. A task whose supervisor and processes are gone is `lost`; a host that cannot
be reached makes its tasks `unreachable`, never "running" or "stopped".
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal, cast

from orchestrator.errors import HostError
from orchestrator.monitor.events import EventParser, HeartbeatEvent
from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.views import Liveness, TaskView
from orchestrator.plan.model import TaskPlan
from orchestrator.run import records, slurm_end
from orchestrator.run.remote import RemoteRun, with_retry
from orchestrator.transport.factory import Opener, transport_for
from orchestrator.transport.fan_out import fan_out
from training.telemetry.state_files import ProbeReport, SupervisorStateFile

RunState = Literal["running", "finished", "failed", "stopped", "partial"]
TaskStatusWord = Liveness | Literal["not-started"]
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
    failed: bool = False  # exited for good with an error (not ended by the user, the run or a stop)
    updated_at: float | None = None
    stopped_by: str | None = None  # "user" (stopped for good), "run" (ended with the run), "stop"
    restarts_left: int | None = None
    error: str | None = None
    no_progress_reported: bool = False  # judged by its CPU: it reports no progress tfcluster can read

    @property
    def name(self) -> str:
        return f"{self.job}:{self.index}"

    @property
    def held(self) -> bool:
        """Stopped for good by the user (training/supervisor/hold.py): never a failure."""
        return self.stopped_by == "user"


@dataclass
class HostStatus:
    host: str
    reachable: bool
    error: str | None = None
    supervisor: str | None = None  # its last recorded state: starting | running | finished | failed | stopped
    supervisor_alive: bool = False
    supervisor_pid: int | None = None
    processes: int = 0  # live processes of the run on this host
    outcome: str | None = None  # the run's outcome as this host's supervisor knows it


@dataclass
class RunStatus:
    run_id: str
    state: RunState
    tasks: list[TaskStatus]
    hosts: list[HostStatus]
    global_step: int | None = None  # the highest any task reported
    loss: float | None = None
    slurm: dict[str, str] | None = None  # a Slurm run's job: {"job_id", "state", "reason"} (run.slurm_end)

    @property
    def failed(self) -> bool:
        return any(t.failed for t in self.tasks)

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "state": self.state, "failed": self.failed,
                "global_step": self.global_step, "loss": self.loss,
                "tasks": [{**asdict(t), "name": t.name, "held": t.held} for t in self.tasks],
                "hosts": [asdict(h) for h in self.hosts], **({"slurm": self.slurm} if self.slurm else {})}


def _task_status(planned: TaskPlan, seen: ProbeReport | HostError | None, judged: TaskView) -> TaskStatus:
    ts = TaskStatus(job=planned.job, index=planned.index, host=planned.host, state="not-started")
    if isinstance(seen, HostError):
        ts.state = "unreachable"
        return ts
    data = None if seen is None else next((t for t in seen.tasks if t.job == ts.job and t.task == ts.index), None)
    if seen is None or data is None:
        return ts
    ts.state = judged.liveness
    ts.pid, ts.restarts = data.pid, data.restarts
    ts.exit_code, ts.signal = data.exit_code, data.signal
    ts.final, ts.updated_at = data.final, data.updated_at
    sup = seen.supervisor
    stopped = sup is not None and sup.state == "stopped"
    ts.failed = data.failed and not stopped
    ts.stopped_by = data.stopped_by
    ts.restarts_left = data.restarts_left
    ts.error = data.error
    ts.no_progress_reported = judged.no_progress
    return ts


def judge(record: records.RunRecord, probes: dict[str, ProbeReport | HostError], now: float) -> ClusterState:
    """The dashboard's ClusterState fed with what the probes saw at `now` (a host that answered is heard
    now; one that did not never was)."""
    st = ClusterState.from_plan(record.plan, record.run_id, interval_s=1.0, now=now)
    parser = EventParser()
    for name, seen in probes.items():
        if isinstance(seen, HostError):
            st.host(name).created = now - 1e9  # never heard: unreachable
            continue
        remote_now = seen.now if seen.now is not None else now
        st.apply(HeartbeatEvent(remote_now, name, 1.0), now)
        lines: list[dict[str, Any]] = [{**t, "kind": "task_state", "t": t["updated_at"]} for t in _raw_tasks(seen)]
        lines += [line for line in seen.progress.values() if isinstance(line, dict)]
        lines.append({**_live_facts(seen), "kind": "host_sample", "t": remote_now, "host": name})
        for line in sorted(lines, key=lambda d: d.get("t") or 0):
            event = parser.parse(json.dumps(line))
            if event is not None:
                st.apply(event, now)
    st.tick(now)
    return st


def _live_facts(seen: ProbeReport) -> dict[str, Any]:
    """The host's facts with what this probe saw live: whether the supervisor lives and how many
    processes each task has (the facts file stops changing when its supervisor dies)."""
    facts = dict(seen.facts or {})
    live = [p.task.split("#", 1)[0] for p in seen.processes if p.task]
    tasks = {name: dict(f) for name, f in (facts.get("tasks") or {}).items() if isinstance(f, dict)}
    for t in seen.tasks:
        tasks.setdefault(f"{t.job}-{t.task}", {})
    for name, f in tasks.items():
        f["procs"] = live.count(name)
    facts["tasks"] = tasks
    if seen.supervisor is not None:
        facts["supervisor"] = {"pid": seen.supervisor.pid, "alive": seen.supervisor.alive}
    return facts


def _raw_tasks(seen: ProbeReport) -> list[dict[str, Any]]:
    return [{**asdict(t), "host": t.host, "job": t.job, "task": t.task} for t in seen.tasks]


def _host_status(name: str, seen: ProbeReport | HostError | None) -> HostStatus:
    if seen is None:
        return HostStatus(name, reachable=True, error="never prepared")
    if isinstance(seen, HostError):
        return HostStatus(name, reachable=False, error=seen.one_line())
    sup: SupervisorStateFile | None = seen.supervisor
    return HostStatus(
        name, reachable=True, supervisor=sup.state if sup else None, supervisor_alive=bool(sup and sup.alive),
        supervisor_pid=sup.pid if sup else None, processes=len(seen.processes), outcome=sup.outcome if sup else None,
        error="run dir absent" if seen.absent else None,
    )


def status(record: records.RunRecord, *, timeout: float = 15.0, opener: Opener = transport_for) -> RunStatus:
    job = slurm_end.look(record)  # a Slurm run: its job now (once it has ended, the hosts are read elsewhere)
    if job is not None:
        opener = slurm_end.opener_for(record, job)
    names = [h.name for h in record.hosts if h.run_dir]
    plan_hosts = {h.name: h for h in record.plan.hosts}  # dicts: a lookup per host, not a scan
    run_dirs = {h.name: h.run_dir for h in record.hosts}

    def one(name: str) -> ProbeReport:
        remote = RemoteRun(plan_hosts[name], run_dirs[name], opener)
        try:
            return with_retry(name, lambda: remote.probe(timeout), time.monotonic() + timeout)
        finally:
            remote.close()

    probes = fan_out(names, one, shardable=True)
    judged = judge(record, probes, time.time())
    hosts = [_host_status(h.name, probes.get(h.name)) for h in record.hosts]
    tasks = [_task_status(t, probes.get(t.host), judged.tasks[t.name]) for t in record.plan.tasks]
    state = _run_state(record, tasks, hosts)
    end = slurm_end.ended_run(record, job) if job is not None else None
    if end is not None:
        for t in tasks:  # the job has ended: nothing of it runs, and no supervisor will say more
            by_slurm = end.lost and t.stopped_by == "stop"  # a node failure: Slurm ended them, not the run
            if t.state != "exited" or by_slurm:
                t.state = "lost"
        state = cast(RunState, end.state) if end.state else _run_state(record, tasks, hosts)
    if (state in ("finished", "failed") or (end is not None and state == "stopped")) and record.status != state:
        record.status = state  # what `ls` shows from now on
        records.save(record)
    slurm = None if job is None else {"job_id": job.job_id, "state": job.state, "reason": end.reason if end else job.reason}
    return RunStatus(record.run_id, state, tasks, hosts, judged.global_step, judged.loss, slurm)


def _run_state(record: records.RunRecord, tasks: list[TaskStatus], hosts: list[HostStatus]) -> RunState:
    """The run's state from every host's view: the supervisors' outcome (their success policy) first."""
    outcomes = {h.outcome for h in hosts if h.outcome}
    all_final = bool(tasks) and all(t.final for t in tasks)
    if any(t.failed for t in tasks) or "failed" in outcomes:
        return "failed"
    if all_final and (all(t.held for t in tasks) or "stopped" in outcomes):
        return "stopped"  # the user stopped for good what the run waited for
    ended_well = all(t.exit_code == 0 or t.stopped_by in ("user", "run") for t in tasks)
    if all_final and ("finished" in outcomes or ended_well):
        return "finished"  # held tasks included: the user chose to go on without them
    if any(not h.reachable for h in hosts):
        return "partial"  # what runs there is unknown: never call such a run stopped or running
    alive = any(h.processes for h in hosts)
    if not alive and (record.status in ("stopped", "purged", "failed-to-start", "interrupted")
                      or any(h.supervisor == "stopped" for h in hosts)):
        return "stopped"
    if record.status == "partial" or any(t.state in ("not-started", "lost", "unreachable") for t in tasks):
        return "partial"
    return "running"
