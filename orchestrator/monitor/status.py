"""`status`, `dash --once` and the dashboard's first frame: one read of every host, judged by the reducer.

Each host is read in ONE command that starts no Python there (orchestrator/run/read_host.py), all hosts
at once (transport.fan_out), one connection each. What a read saw is folded into the dashboard's own
reducer (ClusterState) as the events it stands for: the task state files as the TaskRecords they are
(training/telemetry/task_record.py: the same record an agent streams), the newest
progress lines as progress (two of them give the current rates), the facts as a host_sample. So the
commands that print a run, and the live dashboard, judge every task by the same functions and print
the same TaskStates (task_state.py). A task whose supervisor and processes are gone is `lost`; a host
that cannot be read makes its tasks `unreachable`, never "running" or "stopped".
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, cast

from orchestrator.errors import HostError
from orchestrator.monitor import slurm_watch
from orchestrator.monitor.events import Event, HeartbeatEvent, Malformed, from_dict
from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.resize_notes import say_resizes
from orchestrator.monitor.task_state import RunState
from orchestrator.monitor.views import run_state
from orchestrator.plan.names import file_stem
from orchestrator.plan.slurm import before_allocation
from orchestrator.run import records, slurm_end
from orchestrator.run.read_host import HostReading, decode, read_script
from orchestrator.run.remote import RemoteRun, with_retry
from orchestrator.transport.factory import Opener, transport_for
from orchestrator.transport.fan_out import fan_out
from training.telemetry.traffic import TRAFFIC_KEYS

READ_INTERVAL_S = 1.0  # what a read's facts and progress are judged against (the supervisor's pace)


def read_hosts(record: records.RunRecord, *, timeout: float = 15.0,
               opener: Opener = transport_for) -> dict[str, HostReading | HostError]:
    """Every host of the run that was prepared, read at once (a lost connection is tried again)."""
    names = [h.name for h in record.hosts if h.run_dir]
    plan_hosts = {h.name: h for h in record.plan.hosts}  # dicts: a lookup per host, not a scan
    run_dirs = {h.name: h.run_dir for h in record.hosts}

    def one(name: str) -> HostReading:
        remote = RemoteRun(plan_hosts[name], run_dirs[name], opener)
        try:
            script = read_script(run_dirs[name], name)
            result = with_retry(name, lambda: remote.run_shell(script, timeout), time.monotonic() + timeout)
            return decode(name, result)
        finally:
            remote.close()

    return fan_out(names, one, shardable=True)


def _facts(name: str, seen: HostReading, remote_now: float) -> dict[str, Any]:
    """The host_sample a read stands for. While the supervisor lives its facts are current (its measured
    PS traffic with its current rates included: training/telemetry/traffic.py); once it is dead they are
    stale, and each task's processes are the ones the read found carrying its id."""
    tasks = {stem: dict(f) for stem, f in (seen.facts.get("tasks") or {}).items() if isinstance(f, dict)}
    gpus = seen.facts.get("gpus")  # its GPUs, and each task's memory on them, as its supervisor read them
    if seen.processes is not None:
        live = [p.task.split("#", 1)[0] for p in seen.processes if p.task]
        for t in seen.tasks:
            tasks.setdefault(file_stem(t.job, t.task), {})  # (events.py maps it back to the task's name)
        for stem, f in tasks.items():
            f["procs"] = live.count(stem)
            f.pop("gpu_mem", None)  # nobody reads the GPUs for a dead supervisor: its figures are old
        gpus = None
    traffic = {} if seen.processes is not None else {
        key: seen.facts[key] for key in TRAFFIC_KEYS if isinstance(seen.facts.get(key), dict)}
    sup = seen.supervisor
    supervisor = {"alive": seen.supervisor_alive, "state": sup.state if sup else None,
                  "outcome": sup.outcome if sup else None}
    return {"kind": "host_sample", "t": remote_now, "host": name, "tasks": tasks, "supervisor": supervisor,
            **({"gpus": gpus} if isinstance(gpus, list) else {}), **traffic}


def _events(name: str, seen: HostReading, remote_now: float) -> list[Event]:
    events: list[Event] = list(seen.tasks)  # each task's record, as its state file holds it
    for line in [*(x for lines in seen.progress.values() for x in lines), _facts(name, seen, remote_now)]:
        try:
            ev = from_dict(line)
        except Malformed:
            continue
        if ev is not None:
            events.append(ev)
    return sorted(events, key=lambda e: e.t)


def fold(st: ClusterState, name: str, seen: HostReading | HostError | None, now: float) -> None:
    """What one read of host `name` saw, at local time `now` (None: the host was never prepared)."""
    host = st.host(name)
    if isinstance(seen, HostError):
        host.created = now - 1e9  # never heard: unreachable
        host.error = seen.one_line()
        return
    remote_now = seen.now if seen is not None and seen.now is not None else now
    st.apply(HeartbeatEvent(remote_now, name, st.interval_s), now)
    if seen is None or seen.absent:
        host.absent, host.processes = True, 0
        host.error = "never prepared" if seen is None else "run dir absent"
        return
    for ev in _events(name, seen, remote_now):
        st.apply(ev, now)
    sup = seen.supervisor
    host.supervisor_pid = sup.pid if sup else None
    host.supervisor_alive = seen.supervisor_alive
    if seen.processes is not None:
        host.processes = len(seen.processes)
    if seen.damaged:
        host.error = f"unreadable: {', '.join(seen.damaged)}"


def read_run(record: records.RunRecord, *, timeout: float = 15.0, opener: Opener = transport_for) -> ClusterState:
    """The run as one read of every host shows it, judged now; a Slurm run's job asked first (its nodes are
    reached through it; once Slurm ended it, that end is the run's: run.slurm_end; while it waits for
    nodes the run is `pending`). A run found finished
    or failed (or, by Slurm, stopped) is recorded so (what `ls` shows from then on)."""
    job = slurm_end.look(record)
    if job is not None:
        opener = slurm_end.opener_for(record, job)
    readings = read_hosts(record, timeout=timeout, opener=opener)
    now = time.time()
    st = ClusterState.from_plan(record.plan, record.run_id, interval_s=READ_INTERVAL_S, now=now)
    st.record_status = record.status
    say_resizes(st, record)
    for h in record.hosts:
        fold(st, h.name, readings.get(h.name), now)
    st.tick(now)
    end = slurm_end.ended_run(record, job) if job is not None else None
    if end is not None:
        _ended_by_the_scheduler(st, end)
        slurm_watch.say(st, record, end)  # and its line in the event log, as the live dashboard shows it
    elif job is not None and before_allocation(record.plan):
        st.run_state = "pending"  # its tasks are not-started because the job has no nodes yet, not "partial"
    if job is not None:
        st.slurm = {"job_id": job.job_id, "state": job.state, "reason": end.reason if end else job.reason}
    ended_by_slurm = end is not None and st.run_state == "stopped"
    if (st.run_state in ("finished", "failed") or ended_by_slurm) and record.status != st.run_state:
        record.status = cast(records.RecordStatus, st.run_state)  # finished, failed or stopped
        records.save(record)
    return st


def _ended_by_the_scheduler(st: ClusterState, end: slurm_end.RunEnd) -> None:
    """The job has ended: nothing of it runs, and no supervisor will say more. Its tasks still up are lost
    (and those `stop`ped by a node failure: Slurm ended them, not the run); the run's state is the job's."""
    for name, t in list(st.tasks.items()):
        if t.state != "exited" or (end.lost and t.stopped_by == "stop"):
            st.tasks[name] = dataclasses.replace(t, state="lost", steps_per_s=None, examples_per_s=None)
    st.counts = {state: sum(1 for t in st.tasks.values() if t.state == state) for state in st.counts}
    st.run_state = cast(RunState, end.state) if end.state else run_state(st.tasks.values(), st.hosts.values(),
                                                                         st.record_status)
