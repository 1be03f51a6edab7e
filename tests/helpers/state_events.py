"""Monitor events for reducer tests: build a progress, heartbeat or task_state event as a host writes it and
feed it to a ClusterState through the real parser."""

from __future__ import annotations

from orchestrator.monitor.events import EventParser
from orchestrator.monitor.reducer import ClusterState
from training.telemetry.schema import dumps, make_event

T0 = 1_700_000_000.0


def feed(st: ClusterState, ev: dict, now: float | None = None) -> None:
    parsed = EventParser().parse(dumps(ev))
    assert parsed is not None
    st.apply(parsed, ev["t"] if now is None else now)


def hb(host: str, t: float) -> dict:
    return make_event("heartbeat", host, t=t, interval_s=1.0)


def progress(t: float, step: int, gstep: int | None = None, job: str = "worker", task: int = 0, host: str = "a",
             examples: int | None = None, loss: float = 1.0, **kw: object) -> dict:
    return make_event("progress", host, job=job, task=task, t=t, local_step=step,
                      global_step=step if gstep is None else gstep,
                      examples=step * 10 if examples is None else examples, loss=loss, interval_s=1.0, **kw)


def task_state(t: float, state: str, job: str = "worker", task: int = 0, host: str = "a", **kw: object) -> dict:
    return make_event("task_state", host, job=job, task=task, t=t, state=state, **kw)
