"""Synthetic clusters: deterministic event streams for the dashboard's tests and benchmark.

Not a fake of anything real at run time: it exists so screens can be rendered from a known history
(a healthy run, a stalled worker, a killed worker that restarts, a lost host, hundreds of tasks).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.monitor.events import (
    Event,
    GpuSample,
    HeartbeatEvent,
    HostSampleEvent,
    ProgressEvent,
    PsBytes,
    PsTcp,
    StreamDown,
)
from orchestrator.monitor.reducer import ClusterState
from orchestrator.plan.names import job_and_index, task_name
from training.telemetry.task_record import TaskRecord
from training.telemetry.traffic import smooth

BATCH = 128


@dataclass
class Scenario:
    workers: int = 2
    ps: int = 1
    hosts: int = 2  # workers are spread over hosts h0..; PS tasks live on their own hosts p0..
    seconds: int = 70
    start: float = 1_700_000_000.0
    stall: str | None = None  # the worker ("worker:1") that stops making progress
    stall_at: float = 50.0
    kill: str | None = None  # the worker SIGKILLed and restarted
    kill_at: float = 55.0
    lost_host: str | None = None  # host whose stream drops
    lost_at: float = 60.0
    gpus: bool = False
    run_id: str = "20231114-221320-demo"
    task_hosts: dict[str, str] = field(default_factory=dict)

    def worker_host(self, i: int) -> str:
        return f"h{i % self.hosts}"


def _speed(i: int) -> int:
    """Steps per second of worker i: varied but deterministic."""
    return 3 + (i * 7) % 5


def build(sc: Scenario) -> tuple[ClusterState, list[tuple[float, Event]]]:  # noqa: PLR0912 - one branch per scripted incident
    st = ClusterState(sc.run_id, "between-graph", "demo", 1.0, now=sc.start)
    for p in range(sc.ps):
        st.add_task("ps", p, f"p{p}", port=23000 + p)
    for i in range(sc.workers):
        st.add_task("worker", i, sc.worker_host(i), gpus=(0,) if sc.gpus else ())
    events: list[tuple[float, Event]] = []
    t0 = sc.start
    gstep = 0
    steps = {i: 0 for i in range(sc.workers)}
    restart_at = sc.kill_at + 3.0
    kill_idx = job_and_index(sc.kill)[1] if sc.kill else -1
    stall_idx = job_and_index(sc.stall)[1] if sc.stall else -1
    host_names = [f"h{h}" for h in range(min(sc.hosts, sc.workers))] + [f"p{p}" for p in range(sc.ps)]
    tcp_in = dict.fromkeys(range(sc.ps), 0)
    tcp_out = dict.fromkeys(range(sc.ps), 0)
    # the rates each PS host's supervisor makes of its counters (training/telemetry/traffic.py)
    rate: dict[int, tuple[float, float] | None] = dict.fromkeys(range(sc.ps))
    sampled: dict[int, tuple[int, int] | None] = dict.fromkeys(range(sc.ps))

    def alive(host: str, t: float) -> bool:
        return not (sc.lost_host == host and t - t0 >= sc.lost_at)

    for p in range(sc.ps):
        events.append((t0, TaskRecord(t0, f"p{p}", "ps", p, "running", pid=1000 + p)))
    for i in range(sc.workers):
        events.append((t0, TaskRecord(t0, sc.worker_host(i), "worker", i, "running", pid=2000 + i)))
    for s in range(sc.seconds + 1):
        t = t0 + s
        for h in host_names:
            if alive(h, t):
                events.append((t, HeartbeatEvent(t, h, 1.0)))
        moved = 0
        for i in range(sc.workers):
            h = sc.worker_host(i)
            if not alive(h, t) or (i == stall_idx and s >= sc.stall_at):
                continue
            if i == kill_idx and sc.kill_at <= s < restart_at + 1:
                continue
            if i == kill_idx and s >= restart_at + 1 and steps[i] > 0 and s == int(restart_at) + 1:
                steps[i] = 0  # the new process counts from zero
            v = _speed(i)
            steps[i] += v
            moved += v
            pb = {task_name("ps", p): PsBytes(pulled=40_000 * v, pushed=40_000 * v) for p in range(sc.ps)}
            loss = round(2.0 / (1.0 + 0.05 * s) + 0.01 * i, 4)
            events.append((t, ProgressEvent(t, h, "worker", i, steps[i], gstep + moved, steps[i] * BATCH, loss, 1.0,
                                            pb)))
        gstep += moved
        for p in range(sc.ps):
            tcp_in[p] += 40_000 * moved
            tcp_out[p] += 41_000 * moved  # measured includes gRPC framing: a little above accounted
        for h in host_names:
            if not alive(h, t):
                continue
            ps_tcp = {}
            if h.startswith("p"):
                p = int(h[1:])
                before, r = sampled[p], rate[p]
                if before is not None:  # (the first sample is the baseline: no rate yet)
                    r = rate[p] = (smooth(r[0] if r else None, tcp_in[p] - before[0], 1.0),
                                   smooth(r[1] if r else None, tcp_out[p] - before[1], 1.0))
                sampled[p] = (tcp_in[p], tcp_out[p])
                peers = ("127.0.0.2", "127.0.0.3")
                ps_tcp[task_name("ps", p)] = PsTcp(23000 + p, tcp_in[p], tcp_out[p],
                                          {"127.0.0.2": (tcp_in[p] // 2, tcp_out[p] // 2),
                                           "127.0.0.3": (tcp_in[p] - tcp_in[p] // 2, tcp_out[p] - tcp_out[p] // 2)},
                                          r[0] if r else None, r[1] if r else None,
                                          {ip: (r[0] / 2, r[1] / 2) for ip in peers} if r else {}, t)
            gpus = (GpuSample(0, 60.0 + (s % 7), 5000.0, 16000.0),) if sc.gpus and h.startswith("h") else ()
            events.append((t, HostSampleEvent(t, h, 20.0 + (s * 13) % 50, 35.0 + (s % 5), gpus, ps_tcp)))
        if sc.kill and s == int(sc.kill_at):
            h = sc.worker_host(kill_idx)
            events.append((t + 0.2, TaskRecord(t + 0.2, h, "worker", kill_idx, "exited", pid=2000 + kill_idx,
                                                   exit_code=-9, restarts=0)))
            events.append((t + 1.2, TaskRecord(t + 1.2, h, "worker", kill_idx, "restarting", restarts=1)))
            events.append((t + 3.0, TaskRecord(t + 3.0, h, "worker", kill_idx, "running", pid=3000 + kill_idx,
                                                   restarts=1)))
        if sc.lost_host and s == int(sc.lost_at):
            events.append((t + 0.5, StreamDown(t + 0.5, sc.lost_host, "connection reset by peer")))
    events.sort(key=lambda p: p[0])
    return st, events


def sample_logs(sc: Scenario) -> dict[str, list[str]]:
    logs = {}
    for i in range(sc.workers):
        logs[task_name("worker", i)] = [f"INFO worker {i}: step {k * 100} loss {2.0 / (1 + k):.4f}" for k in range(30)]
    for p in range(sc.ps):
        logs[task_name("ps", p)] = [f"INFO ps {p}: serving on port {23000 + p}"]
    return logs
