"""ClusterState: what the dashboard and `status --watch` show, built from typed events and a clock.

`ClusterState.apply(event, now)` folds one event in (O(1), mutable for speed: 256 tasks at 1 Hz) and
`ClusterState.tick(now)` recomputes liveness and totals. Liveness itself is the pure functions
`host_reachable` and `task_liveness` of the recorded times and the clock (DESIGN.md "Liveness states").
The state is only touched from one thread (the UI's or the CLI's); collector threads hand over events
through a queue.

Times: event `t` is the remote host's clock; it is mapped to the local clock with a per-host offset
measured from the agent's heartbeats, so ages and rates never depend on clock skew between machines.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from orchestrator.monitor.events import (
    Event,
    HeartbeatEvent,
    HostSampleEvent,
    ProgressEvent,
    PsTcp,
    StreamDown,
    StreamUp,
    TaskStateEvent,
)
from orchestrator.monitor.views import (
    HISTORY_S,
    LIVENESS_STATES,
    LOG_LEN,
    STALE_INTERVALS,
    HostView,
    Liveness,
    LogEntry,
    PsTraffic,
    TaskView,
    append_window,
    ema,
    host_reachable,
    run_state,
    task_liveness,
    task_sort_key,
    window_buckets,
)
from orchestrator.plan.model import ClusterPlan
from training.run.roles import reports_progress

WARMUP_INTERVALS = 3


class ClusterState:
    def __init__(self, run_id: str = "", mode: str = "", cluster_name: str = "", interval_s: float = 1.0,
                 now: float | None = None) -> None:
        self.run_id = run_id
        self.mode = mode
        self.cluster_name = cluster_name
        self.interval_s = interval_s
        self.now = time.time() if now is None else now
        self.tasks: dict[str, TaskView] = {}
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
        self.run_state = "running"  # running | finished | failed | stopped, from the tasks' ends

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
            tv = st.add_task(t.job, t.index, t.host, t.gpu, port=t.port)
            if plan.uses_user_command:
                tv.reports = "maybe"
            else:
                tv.reports = "yes" if reports_progress(plan.mode, t.job) else "no"
        return st

    def host(self, name: str) -> HostView:
        h = self.hosts.get(name)
        if h is None:
            h = self.hosts[name] = HostView(name, self.now, self.interval_s)
        return h

    def add_task(self, job: str, index: int, host: str, gpu: int | None = None, port: int | None = None) -> TaskView:
        name = f"{job}-{index}"
        tv = self.tasks.get(name)
        if tv is None:
            self.host(host)
            tv = self.tasks[name] = TaskView(job, index, host, gpu, reports="no" if job == "ps" else "yes")
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
        elif isinstance(ev, TaskStateEvent):
            self._task_state(ev, host)
        elif isinstance(ev, HostSampleEvent):
            self._host_sample(ev, host, now)
        elif isinstance(ev, HeartbeatEvent):
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
        if prev is not None and ev.local_step >= prev[1] and ev.t > prev[0]:
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

    def _task_state(self, ev: TaskStateEvent, host: HostView) -> None:
        tv = self.add_task(ev.job, ev.task, ev.host)
        t = host.local(ev.t)
        if tv.t_state is not None and t < tv.t_state:
            return  # an older line (files replayed out of order): the newer state stands
        tv.proc_state, tv.t_state, tv.restarts = ev.state, t, max(ev.restarts, tv.restarts)
        tv.stopped_by, tv.restarts_left, tv.error = ev.stopped_by, ev.restarts_left, ev.error
        tv.restart_reason = ev.restart_reason if ev.state == "restarting" else None
        if ev.pid is not None:
            tv.pid = ev.pid
        # Python's convention: a process ended by signal N has exit code -N.
        code = ev.exit_code if ev.exit_code is not None else (-ev.signal if ev.signal else None)
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
        if ev.supervisor_alive is not None:
            host.supervisor_alive = ev.supervisor_alive
        for name, facts in ev.tasks.items():
            tv = self.tasks.get(name)
            if tv is None:
                continue
            tv.procs, tv.sigstopped, tv.cpu_s = facts.procs, facts.stopped, facts.cpu_s
            tv.t_cpu_moved = None if facts.cpu_moved_at is None else host.local(facts.cpu_moved_at)
            tv.t_listening = None if facts.listening_since is None else host.local(facts.listening_since)
        for name, m in ev.ps_tcp.items():
            ps = self.ps.get(name)
            if ps is None:
                ps = self.ps[name] = PsTraffic(name, ev.host)
            _measure(ps, ev.host, m, ev.t, t)
        for name, m in ev.allreduce_tcp.items():
            worker = self.allreduce.get(name)
            if worker is None:
                worker = self.allreduce[name] = PsTraffic(name, ev.host)
            _measure(worker, ev.host, m, ev.t, t)

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
        for tv in self.tasks.values():
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
            if tv.global_step is not None:
                gstep = tv.global_step if gstep is None else max(gstep, tv.global_step)
            if live == "running" and not tv.coordinator:
                steps += tv.steps_per_s or 0.0
                examples += tv.examples_per_s or 0.0
                if tv.loss is not None:
                    losses.append(tv.loss)
        self.counts = counts
        self.run_state = run_state(self.tasks.values())
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

    def sparkline_values(self, tv: TaskView, buckets: int = 12, window_s: float = HISTORY_S) -> list[float]:
        """Steps/s in `buckets` equal slices of the last `window_s` seconds (0 where nothing was seen)."""
        return window_buckets(tv.history, self.now, buckets, window_s)

    def to_json(self) -> dict[str, Any]:
        def r(x: float | None, nd: int = 3) -> float | None:
            return None if x is None else round(x, nd)

        return {
            "run_id": self.run_id, "mode": self.mode, "cluster": self.cluster_name, "now": self.now,
            "interval_s": self.interval_s, "malformed_lines": self.malformed,
            "run_state": self.run_state,
            "totals": {"global_step": self.global_step, "loss": r(self.loss, 6), "steps_per_s": r(self.steps_per_s),
                       "examples_per_s": r(self.examples_per_s), "counts": self.counts},
            "tasks": [
                {"name": tv.name, "job": tv.job, "task": tv.task, "host": tv.host, "state": tv.liveness,
                 "stale": tv.liveness == "unreachable", "process_state": tv.proc_state, "pid": tv.pid,
                 "exit_code": tv.exit_code, "held": tv.held, "restarts": tv.restarts, "local_step": tv.local_step,
                 "global_step": tv.global_step, "loss": r(tv.loss, 6), "steps_per_s": r(tv.steps_per_s),
                 "examples_per_s": r(tv.examples_per_s), "age_s": r(tv.age_s, 2),
                 "no_progress_reported": tv.no_progress, "cpu_s": tv.cpu_s, "restarts_left": tv.restarts_left,
                 "restart_reason": tv.restart_reason, "stopped_by": tv.stopped_by, "error": tv.error}
                for tv in sorted(self.tasks.values(), key=task_sort_key)
            ],
            "hosts": [
                {"name": h.name, "reachable": h.reachable, "stream_up": h.stream_up,
                 "supervisor_alive": h.supervisor_alive, "cpu_pct": r(h.cpu_pct, 1),
                 "mem_pct": r(h.mem_pct, 1),
                 "gpus": [{"index": g.index, "util_pct": g.util_pct, "mem_used_mb": g.mem_used_mb} for g in h.gpus],
                 "age_s": None if h.t_heard is None else r(self.now - h.t_heard, 2)}
                for h in sorted(self.hosts.values(), key=lambda h: h.name)
            ],
            "ps": [
                {"name": p.name, "host": p.host, "port": p.port, "measured_in_Bps": r(p.measured_in, 1),
                 "measured_out_Bps": r(p.measured_out, 1), "accounted_in_Bps": r(p.accounted_in, 1),
                 "accounted_out_Bps": r(p.accounted_out, 1),
                 "peers": {ip: {"in_Bps": round(a, 1), "out_Bps": round(b, 1)} for ip, (a, b) in p.peers.items()}}
                for p in sorted(self.ps.values(), key=lambda p: p.name)
            ],
            "allreduce": [
                {"name": p.name, "host": p.host, "port": p.port, "measured_in_Bps": r(p.measured_in, 1),
                 "measured_out_Bps": r(p.measured_out, 1)}
                for p in sorted(self.allreduce.values(), key=lambda p: p.name)
            ],
            "log": [{"t": e.t, "kind": e.kind, "text": e.text} for e in list(self.log)[-50:]],
        }


def _measure(traffic: PsTraffic, host: str, m: PsTcp, remote_t: float, t: float) -> None:
    """One task's measured traffic from its kernel counters: rates between two samples, smoothed."""
    traffic.host, traffic.port = host, m.port
    prev = traffic._prev
    if prev is not None and remote_t > prev[0] and m.bytes_in >= prev[1] and m.bytes_out >= prev[2]:
        dt = remote_t - prev[0]
        rin, rout = (m.bytes_in - prev[1]) / dt, (m.bytes_out - prev[2]) / dt
        traffic.measured_in = ema(traffic.measured_in, rin, dt)
        traffic.measured_out = ema(traffic.measured_out, rout, dt)
        traffic.t_measured = t
        append_window(traffic.history, t, rin + rout)
        peers: dict[str, tuple[float, float]] = {}
        for ip, (pin, pout) in m.peers.items():
            pp = traffic._prev_peers.get(ip, (0, 0))  # the agent's counters start at 0 for a new peer
            if pin >= pp[0] and pout >= pp[1]:
                peers[ip] = ((pin - pp[0]) / dt, (pout - pp[1]) / dt)
        traffic.peers = peers
    traffic._prev = (remote_t, m.bytes_in, m.bytes_out)
    traffic._prev_peers = dict(m.peers)
