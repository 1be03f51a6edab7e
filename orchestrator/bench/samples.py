"""Every raw sample of a cell, as the collector delivers it: progress, host samples, task states.

`RecordingState` is the dashboard's own ClusterState (liveness, totals: what the bench waits on) that
also keeps each typed event it folds in. Times are kept as the host wrote them and mapped to this
machine's clock at the end with the host's final offset (measured from the agent's heartbeats, so a
backlog replayed before the first heartbeat still lands at the right time).

`CellSamples` is the JSON-ready form (compact lists, every sample kept), shared by the figures and the
report file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.monitor.events import Event, HostSampleEvent, ProgressEvent
from orchestrator.monitor.reducer import ClusterState
from orchestrator.plan.names import task_name
from training.telemetry.task_record import TaskRecord


@dataclass(frozen=True)
class ProgressSample:
    t: float  # local unix time
    task: str  # "worker:1"
    local_step: int
    global_step: int
    examples: int | None
    loss: float | None
    interval_s: float | None
    ps_bytes: dict[str, tuple[int, int]]  # ps name -> (pulled, pushed) in the interval
    coordinator: bool = False

    def to_json(self) -> list[Any]:
        return [round(self.t, 4), self.task, self.local_step, self.global_step, self.examples, self.loss,
                self.interval_s, {k: list(v) for k, v in self.ps_bytes.items()}, self.coordinator]

    @classmethod
    def from_json(cls, raw: list[Any]) -> ProgressSample:
        t, task, local, gstep, examples, loss, interval, ps, coordinator = raw
        return cls(float(t), str(task), int(local), int(gstep), None if examples is None else int(examples),
                   None if loss is None else float(loss), None if interval is None else float(interval),
                   {str(k): (int(v[0]), int(v[1])) for k, v in dict(ps).items()}, bool(coordinator))


@dataclass(frozen=True)
class HostSample:
    t: float
    host: str
    cpu_pct: float | None
    ps_tcp: dict[str, tuple[int, int]]  # ps name -> (bytes_in, bytes_out) counters, PS side
    task_cpu_s: dict[str, float]  # task name -> CPU seconds (a counter)
    # When the host's supervisor read both counters (this machine's clock; None: unknown, the sample's own
    # time). The agent forwards the supervisor's newest reading, made once a second, so the sample's time
    # can be a second later than the reading's, and two samples can carry one reading.
    t_facts: float | None = None

    @property
    def t_read(self) -> float:
        return self.t if self.t_facts is None else self.t_facts

    def to_json(self) -> list[Any]:
        return [round(self.t, 4), self.host, self.cpu_pct, {k: list(v) for k, v in self.ps_tcp.items()},
                {k: round(v, 3) for k, v in self.task_cpu_s.items()},
                None if self.t_facts is None else round(self.t_facts, 4)]

    @classmethod
    def from_json(cls, raw: list[Any]) -> HostSample:
        t, host, cpu, ps, tasks, *rest = raw  # (a report from before t_facts has five fields)
        t_facts = rest[0] if rest else None
        return cls(float(t), str(host), None if cpu is None else float(cpu),
                   {str(k): (int(v[0]), int(v[1])) for k, v in dict(ps).items()},
                   {str(k): float(v) for k, v in dict(tasks).items()}, None if t_facts is None else float(t_facts))


@dataclass(frozen=True)
class StateSample:
    t: float
    task: str
    state: str
    exit_code: int | None
    restarts: int

    def to_json(self) -> list[Any]:
        return [round(self.t, 4), self.task, self.state, self.exit_code, self.restarts]

    @classmethod
    def from_json(cls, raw: list[Any]) -> StateSample:
        t, task, state, code, restarts = raw
        return cls(float(t), str(task), str(state), None if code is None else int(code), int(restarts))


@dataclass
class CellSamples:
    progress: list[ProgressSample] = field(default_factory=list)
    hosts: list[HostSample] = field(default_factory=list)
    states: list[StateSample] = field(default_factory=list)

    def of_task(self, task: str) -> list[ProgressSample]:
        return [p for p in self.progress if p.task == task]

    def to_json(self) -> dict[str, Any]:
        return {
            "progress_fields": ["t", "task", "local_step", "global_step", "examples", "loss", "interval_s",
                                "ps_bytes {ps: [pulled, pushed]}", "coordinator"],
            "progress": [p.to_json() for p in self.progress],
            "host_fields": ["t", "host", "cpu_pct", "ps_tcp {ps: [bytes_in, bytes_out]}", "task_cpu_s {task: s}",
                            "t_facts"],
            "hosts": [h.to_json() for h in self.hosts],
            "state_fields": ["t", "task", "state", "exit_code", "restarts"],
            "states": [s.to_json() for s in self.states],
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> CellSamples:
        return cls([ProgressSample.from_json(p) for p in raw.get("progress", [])],
                   [HostSample.from_json(h) for h in raw.get("hosts", [])],
                   [StateSample.from_json(s) for s in raw.get("states", [])])


class RecordingState(ClusterState):
    """ClusterState that keeps every progress, host sample and task state event it folds in."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._raw: list[Event] = []

    def apply(self, ev: Event, now: float) -> None:
        super().apply(ev, now)
        if isinstance(ev, ProgressEvent | HostSampleEvent | TaskRecord):
            self._raw.append(ev)

    def samples(self) -> CellSamples:
        """Every kept event, on this machine's clock (each host's offset as last measured)."""
        out = CellSamples()
        for ev in self._raw:
            offset = self.hosts[ev.host].clock_offset if ev.host in self.hosts else 0.0
            t = ev.t + offset
            if isinstance(ev, ProgressEvent):
                out.progress.append(ProgressSample(
                    t, task_name(ev.job, ev.task), ev.local_step, ev.global_step, ev.examples, ev.loss, ev.interval_s,
                    {k: (b.pulled, b.pushed) for k, b in ev.ps_bytes.items()}, ev.coordinator))
            elif isinstance(ev, HostSampleEvent):
                out.hosts.append(HostSample(t, ev.host, ev.cpu_pct,
                                            {k: (m.bytes_in, m.bytes_out) for k, m in ev.ps_tcp.items()},
                                            {k: f.cpu_s for k, f in ev.tasks.items()},
                                            None if ev.facts_t is None else ev.facts_t + offset))
            elif isinstance(ev, TaskRecord):
                out.states.append(StateSample(t, task_name(ev.job, ev.task), ev.state, ev.exit_code, ev.restarts))
        for series in (out.progress, out.hosts, out.states):
            series.sort(key=lambda s: s.t)
        return out
