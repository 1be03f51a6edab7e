"""ClusterState, the one reducer: typed events and a clock in, one frozen TaskState per task out.
A task's state arrives as its supervisor's TaskRecord (training/telemetry/task_record.py), from an agent's
stream or from one read of its state file alike; the reducer keeps the last one (views.TaskTrack).

`ClusterState.apply(event, now)` folds one event into the working state (O(1), mutable for speed: 1024
tasks at 1 Hz) and `ClusterState.tick(now)` judges every task and the run and hands out the snapshots:
`tasks` (name -> TaskState, task_state.py), `run_state`, the totals. Readers use only those (and the
per-task histories for sparklines, `history` for the dashboard's graphs: history.py). Liveness itself is the pure functions of views.py of the recorded
times and the clock (DESIGN.md "Liveness states"). `status`, `dash --once` and the dashboard's first
frame feed it what one read of each host saw (status.py); the dashboard and `status --watch` the agents'
streams (collect.py).
The state is only touched from one thread (the UI's or the CLI's); collector threads hand over events
through a queue.

Times: event `t` is the remote host's clock; it is mapped to the local clock with a per-host offset
measured from the agent's heartbeats, so ages and rates never depend on clock skew between machines.
"""

from __future__ import annotations

import time
from collections import deque

from orchestrator.monitor.events import (
    Event,
    HeartbeatEvent,
    HostSampleEvent,
    ProgressEvent,
    PsTcp,
    StreamDown,
    StreamUp,
)
from orchestrator.monitor.gpu_use import GPU_SETTLE_S, cuda_gpus, on_cpu_suspected
from orchestrator.monitor.history import RunHistory, record_progress
from orchestrator.monitor.task_state import LIVENESS_STATES, Liveness, Reports, RunState, TaskState
from orchestrator.monitor.views import (
    HISTORY_S,
    LOG_LEN,
    STALE_INTERVALS,
    HostView,
    LogEntry,
    PsTraffic,
    TaskTrack,
    append_window,
    ema,
    host_reachable,
    run_state,
    snapshot,
    task_liveness,
    window_buckets,
)
from orchestrator.plan.model import ClusterPlan, TaskPlan
from orchestrator.plan.names import task_name
from training.run.roles import reports_progress
from training.telemetry.task_record import TaskRecord

WARMUP_INTERVALS = 3


class ClusterState:
    def __init__(self, run_id: str = "", mode: str = "", cluster_name: str = "", interval_s: float = 1.0,
                 now: float | None = None) -> None:
        self.run_id = run_id
        self.mode = mode
        self.cluster_name = cluster_name
        self.interval_s = interval_s
        self.now = time.time() if now is None else now
        self.tracks: dict[str, TaskTrack] = {}  # the working state, by task name
        self.tasks: dict[str, TaskState] = {}  # what the last tick judged: what every reader reads
        self.hosts: dict[str, HostView] = {}
        self.ps: dict[str, PsTraffic] = {}
        self.allreduce: dict[str, PsTraffic] = {}  # multi-worker-mirrored: each worker's measured traffic
        self.log: deque[LogEntry] = deque(maxlen=LOG_LEN)
        self.log_total = 0  # entries ever logged, so a view can append only the new ones
        self.log_generation = 0  # bumped when an entry went in before the last one (redraw, do not append)
        self.malformed = 0  # lines the collector could not parse
        self.version = 0  # bumped on every change, so a view can skip an unchanged frame
        self.counts: dict[Liveness, int] = dict.fromkeys(LIVENESS_STATES, 0)
        self.global_step: int | None = None
        self.loss: float | None = None
        self.examples_per_s = 0.0
        self.steps_per_s = 0.0
        self.run_state: RunState = "running"
        self.record_status: str | None = None  # the local run record's word, when there is one
        self.gpu_settle_s = GPU_SETTLE_S  # how long a task planned on a GPU runs before `on CPU?` may be said
        self.slurm: dict[str, str] | None = None  # a Slurm run's job: {"job_id", "state", "reason"} (run.slurm_end)
        self.history = RunHistory()  # the dashboard's graphs: the whole run, bounded (history.py)

    # -- construction ---------------------------------------------------------------------------------

    @classmethod
    def from_plan(cls, plan: ClusterPlan, run_id: str = "", interval_s: float = 1.0,
                  now: float | None = None) -> ClusterState:
        """Every planned task and host is known (and shown) before its first event arrives, with whether
        it reports progress (training/run/roles.py: the built-in trainers do, servers never, a user's
        program maybe)."""
        st = cls(run_id, plan.mode, plan.cluster_name, interval_s, now)
        for h in plan.hosts:
            st.host(h.name)
        for t in plan.tasks:
            st.add_planned(plan, t)
        return st

    def add_planned(self, plan: ClusterPlan, t: TaskPlan) -> TaskTrack:
        """A task of `plan` (at open, or joining by a resize: monitor/reshape.py), its planned facts set even
        when its first events came before the plan that has it."""
        tv = self.add_task(t.job, t.index, t.host, t.gpus, port=t.port)
        tv.reports = "maybe" if plan.uses_user_command else ("yes" if reports_progress(plan.mode, t.job) else "no")
        tv.gpus, tv.cuda_gpus = t.gpus, cuda_gpus(t.cuda_visible_devices)  # `on CPU?`
        return tv

    def drop_task(self, name: str) -> None:
        """A task the run no longer has (a resize removed it, or moved it elsewhere): its row, its graph line
        and its traffic go, and nothing says it was lost (a host's own lines say how it ended)."""
        self.tracks.pop(name, None)
        self.tasks.pop(name, None)
        self.ps.pop(name, None)
        self.allreduce.pop(name, None)
        for ps in self.ps.values():
            ps._by_worker.pop(name, None)  # what it accounted no longer adds to a PS's traffic
        self.history.tasks.pop(name, None)
        self.version += 1

    def drop_host(self, name: str) -> None:
        """A host the run left (a resize): it, any task still on it, and its graphs go."""
        for task in [n for n, tv in self.tracks.items() if tv.host == name]:
            self.drop_task(task)
        self.hosts.pop(name, None)
        self.history.hosts.pop(name, None)
        self.version += 1

    def host(self, name: str) -> HostView:
        h = self.hosts.get(name)
        if h is None:
            h = self.hosts[name] = HostView(name, self.now, self.interval_s)
        return h

    def add_task(self, job: str, index: int, host: str, gpus: tuple[int, ...] = (), port: int | None = None,
                 reports: Reports | None = None) -> TaskTrack:
        name = task_name(job, index)
        tv = self.tracks.get(name)
        if tv is None:
            self.host(host)
            tv = self.tracks[name] = TaskTrack(job, index, host, gpus, reports=reports or ("no" if job == "ps" else "yes"))
            if job == "ps":
                self.ps[name] = PsTraffic(name, host, port)
        return tv

    # -- events ---------------------------------------------------------------------------------------

    def apply(self, ev: Event, now: float) -> None:
        self.now = max(self.now, now)
        self.version += 1
        host = self.host(ev.host)
        if not isinstance(ev, StreamUp | StreamDown):
            host.t_heard = now
        if isinstance(ev, ProgressEvent):
            self._progress(ev, host)
        elif isinstance(ev, TaskRecord):
            self._task_state(ev, host)
        elif isinstance(ev, HostSampleEvent):
            self._host_sample(ev, host, now)
        elif isinstance(ev, HeartbeatEvent):
            host.error = None  # heard again: whatever could not be read before can be now
            host.clock_offset = now - ev.t
            if ev.interval_s:
                host.interval_s = ev.interval_s
        elif isinstance(ev, StreamUp):
            host.stream_up = True
            host.stream_reason = ""
            host.t_stream_up = now
        elif isinstance(ev, StreamDown):
            host.stream_up = False
            host.stream_reason = ev.reason

    def _progress(self, ev: ProgressEvent, host: HostView) -> None:
        tv = self.add_task(ev.job, ev.task, ev.host)
        t = host.local(ev.t)
        prev = tv._prev
        if prev is not None and ev.t <= prev[0]:
            return  # a line seen already, or older (a stream's backlog replayed after a read of the host)
        record_progress(self.history, ev, tv.name, t, prev)
        if prev is not None and ev.local_step >= prev[1]:
            dt = ev.t - prev[0]
            steps = (ev.local_step - prev[1]) / dt
            tv.steps_per_s = ema(tv.steps_per_s, steps, dt)
            if ev.examples is not None and prev[2] is not None:
                tv.examples_per_s = ema(tv.examples_per_s, max(ev.examples - prev[2], 0) / dt, dt)
            append_window(tv.history, t, steps)
        elif prev is not None and ev.local_step < prev[1]:
            tv.steps_per_s = tv.examples_per_s = None  # a new process: its counters restarted
        if tv.global_step is None or ev.global_step != tv.global_step or tv.t_step_moved is None:
            tv.t_step_moved = t
        tv._prev = (ev.t, ev.local_step, ev.examples)
        tv.local_step, tv.global_step, tv.examples = ev.local_step, ev.global_step, ev.examples
        if ev.loss is not None:
            tv.loss = ev.loss
            append_window(tv.loss_history, t, ev.loss)
        tv.t_progress = t
        tv.coordinator = ev.coordinator
        if ev.ps_bytes and ev.interval_s and ev.interval_s > 0:
            name, interval = tv.name, ev.interval_s  # (once: every worker reports on every PS, every interval)
            for ps_name, b in ev.ps_bytes.items():
                ps = self.ps.get(ps_name)
                if ps is None:
                    ps = self.ps[ps_name] = PsTraffic(ps_name, "")
                ps._by_worker[name] = (t, b.pushed / interval, b.pulled / interval)

    def _task_state(self, ev: TaskRecord, host: HostView) -> None:
        tv = self.add_task(ev.job, ev.task, ev.host)
        t = host.local(ev.t)
        if tv.t_state is not None and t < tv.t_state:
            return  # an older record (files replayed out of order): the newer state stands
        prev = tv.record
        if ev.state != "running":
            tv.t_running = None
        elif tv.t_running is None or prev is None or prev.state != "running" or (ev.pid is not None and ev.pid != tv.pid):
            tv.t_running = t  # a new process: `on CPU?` waits for it to settle
        tv.record, tv.t_state = ev, t
        if ev.pid is not None:
            tv.pid = ev.pid
        # Python's convention: a process ended by signal N has exit code -N.
        code = ev.exit_code if ev.exit_code is not None else (-ev.signal if ev.signal else None)
        # A new process, or none: what came before is the old process's. (Progress newer than this word
        # is the new process's already: another host's stream or read may be folded in first.)
        newer = tv.t_progress is None or t >= tv.t_progress
        if ev.state in ("exited", "restarting") and newer:
            tv.steps_per_s = tv.examples_per_s = None  # the dead process's rates are not the task's
            tv._prev = None
        if ev.state == "exited":
            tv.exit_code = code
            tv.down = True
            why = {"user": ", stopped for good by the user", "run": ", ended with the run",
                   "stop": ", stopped"}.get(ev.stopped_by or "", "")
            self._log(t, "exit", f"{tv.name} on {tv.host} exited (code {code}{why})"
                      + (f": {ev.error}" if ev.error else ""))
        elif ev.state == "restarting":
            if code is not None:
                tv.exit_code = code
            after = f" after exit code {code}" if code is not None else ""
            group = " with its group" if ev.restart_reason == "group" else ""
            left = f", {ev.restarts_left} left" if ev.restarts_left is not None else ""
            self._log(t, "restart", f"{tv.name} on {tv.host} restarting{group}{after} (restart {ev.restarts}{left})"
                      + (f": {ev.error}" if ev.error else ""))
            tv.down = True
        elif ev.state in ("starting", "running"):
            if newer:
                tv._prev = None  # a new process starts its counters from zero
                tv.t_step_moved = None
            if ev.state == "running":
                tv.exit_code = None
                if tv.down:
                    self._log(t, "recover", f"{tv.name} on {tv.host} running again (pid {ev.pid})")
                tv.down = False

    def _host_sample(self, ev: HostSampleEvent, host: HostView, now: float) -> None:
        host.cpu_pct, host.mem_pct, host.gpus, host.t_sample = ev.cpu_pct, ev.mem_pct, ev.gpus, now
        t = host.local(ev.t)
        self.history.host_sample(ev.host, t, ev.t, ev.cpu_pct, ev.mem_pct, ev.gpus,
                                 {**ev.ps_tcp, **ev.allreduce_tcp} if ev.allreduce_tcp else ev.ps_tcp)
        if ev.supervisor_alive is not None:
            host.supervisor_alive = ev.supervisor_alive
        if ev.supervisor_state is not None:
            host.supervisor_state, host.outcome = ev.supervisor_state, ev.outcome
        if ev.tasks:
            host.processes = sum(f.procs for f in ev.tasks.values()) + (1 if ev.supervisor_alive else 0)
        for name, facts in ev.tasks.items():
            tv = self.tracks.get(name)
            if tv is None:
                continue
            tv.procs, tv.sigstopped, tv.cpu_s = facts.procs, facts.stopped, facts.cpu_s
            tv.t_cpu_moved = None if facts.cpu_moved_at is None else host.local(facts.cpu_moved_at)
            tv.t_listening = None if facts.listening_since is None else host.local(facts.listening_since)
            tv.gpu_mem = facts.gpu_mem
        for name, m in ev.ps_tcp.items():
            ps = self.ps.get(name)
            if ps is None:
                ps = self.ps[name] = PsTraffic(name, ev.host)
            _measure(ps, host, m, ev.t)
        for name, m in ev.allreduce_tcp.items():
            worker = self.allreduce.get(name)
            if worker is None:
                worker = self.allreduce[name] = PsTraffic(name, ev.host)
            _measure(worker, host, m, ev.t)

    def note(self, t: float, text: str) -> None:
        """An `info` line in the event log from outside the events (a Slurm job's end: monitor.slurm_watch)."""
        self._log(t, "info", text)

    def _log(self, t: float, kind: str, text: str) -> None:
        """Add an entry in time order: a host's backlog replays older lines after newer ones of others."""
        entry = LogEntry(t, kind, text)
        if self.log and t < self.log[-1].t:
            at = len(self.log)
            while at > 0 and self.log[at - 1].t > t:
                at -= 1
            if len(self.log) == self.log.maxlen:
                self.log.popleft()
                at = max(at - 1, 0)
            self.log.insert(at, entry)
            self.log_generation += 1  # not an append: a view must redraw the log, not add to it
        else:
            self.log.append(entry)
        self.log_total += 1

    # -- clock ----------------------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Recompute liveness, ages and totals at `now`; logs hosts lost and back, tasks stalling."""
        self.now = max(self.now, now)
        now = self.now
        self._tick_hosts(now)
        counts = dict.fromkeys(LIVENESS_STATES, 0)
        steps = examples = 0.0
        gstep: int | None = None
        losses: list[float] = []
        snapshots: dict[str, TaskState] = {}
        for name, tv in self.tracks.items():
            h = self.hosts[tv.host]
            live = task_liveness(tv, h, now)
            if live != tv.liveness:
                # While a stream replays its backlog, old lines make a task look stalled for a moment:
                # no event is logged until its host has been up for a few intervals.
                settled = h.t_stream_up is None or now - h.t_stream_up > WARMUP_INTERVALS * h.interval_s
                if live == "stalled" and tv.liveness == "running" and settled:
                    self._log(now, "stall", f"{tv.name} on {tv.host} stalled")
                elif live == "lost" and settled:
                    self._log(now, "lost", f"{tv.name} on {tv.host} lost: its supervisor and its processes are gone")
                tv.liveness = live
                self.version += 1
            counts[live] = counts.get(live, 0) + 1
            last = h.t_heard if live == "unreachable" else tv.last_data
            if tv.t_progress is None and live == "running" and h.t_sample is not None:
                last = h.t_sample  # a server writes no progress: its freshest data is its host's sample
            tv.age_s = None if last is None else max(now - last, 0.0)
            tv.on_cpu = live in ("running", "stalled") and on_cpu_suspected(
                tv.cuda_gpus, tv.gpu_mem, tv.t_running, now, self.gpu_settle_s)
            snapshots[name] = snapshot(tv, h)
            if tv.global_step is not None:
                gstep = tv.global_step if gstep is None else max(gstep, tv.global_step)
            if live == "running" and not tv.coordinator:
                steps += tv.steps_per_s or 0.0
                examples += tv.examples_per_s or 0.0
                if tv.loss is not None:
                    losses.append(tv.loss)
        self.counts = counts
        self.tasks = snapshots
        self.run_state = run_state(snapshots.values(), self.hosts.values(), self.record_status)
        self.steps_per_s, self.examples_per_s, self.global_step = steps, examples, gstep
        if losses:
            self.loss = sum(losses) / len(losses)
        for ps in self.ps.values():
            fresh = [(rin, rout) for (t, rin, rout) in ps._by_worker.values()
                     if now - t <= STALE_INTERVALS * self.interval_s]
            ps.accounted_in = sum(r[0] for r in fresh) if fresh else (0.0 if ps._by_worker else None)
            ps.accounted_out = sum(r[1] for r in fresh) if fresh else (0.0 if ps._by_worker else None)
            if ps.t_measured is not None and now - ps.t_measured > STALE_INTERVALS * self.interval_s * 2:
                ps.measured_in = ps.measured_out = None  # no fresh sample: do not show an old rate as current

    def _tick_hosts(self, now: float) -> None:
        for h in self.hosts.values():
            ok = host_reachable(h, now)
            if ok == h.reachable:
                continue
            h.reachable = ok
            why = f": {h.stream_reason}" if h.stream_reason else ""
            if ok:
                self._log(now, "host-back", f"host {h.name} back")
            elif h.t_heard is not None:  # (a host not heard from yet was never "lost")
                self._log(now, "host-lost", f"host {h.name} unreachable{why}")
            else:
                self._log(now, "host-lost", f"host {h.name} not reachable yet{why}")
            self.version += 1

    # -- views ----------------------------------------------------------------------------------------

    def sparkline_values(self, name: str, buckets: int = 12, window_s: float = HISTORY_S) -> list[float]:
        """A task's steps/s in `buckets` equal slices of the last `window_s` seconds (0 where nothing was seen)."""
        return window_buckets(self.tracks[name].history, self.now, buckets, window_s)

    def loss_values(self, name: str, buckets: int = 12, window_s: float = HISTORY_S) -> list[float]:
        """A task's loss in `buckets` slices of the last `window_s` seconds (a level: carried forward)."""
        return window_buckets(self.tracks[name].loss_history, self.now, buckets, window_s, fill_forward=True)


def _measure(traffic: PsTraffic, host: HostView, m: PsTcp, remote_t: float) -> None:
    """One task's measured traffic: its rates as its host measured and smoothed them (training/telemetry/
    traffic.py), so a view of one read and the dashboard show the same numbers."""
    traffic.host, traffic.port = host.name, m.port
    if m.in_Bps is None or m.out_Bps is None:
        return  # one sample so far on the host: no rate yet
    t = host.local(m.t if m.t is not None else remote_t)
    if traffic.t_measured is not None and t <= traffic.t_measured:
        return  # a measurement seen already (the agent samples more often than the supervisor measures)
    traffic.measured_in, traffic.measured_out, traffic.t_measured = m.in_Bps, m.out_Bps, t
    traffic.peers = dict(m.peer_rates)
    append_window(traffic.history, t, m.in_Bps + m.out_Bps)
