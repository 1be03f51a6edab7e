"""Typed telemetry events: JSON lines (training/telemetry/schema.py) become frozen dataclasses, and a
`task_state` line the task's TaskRecord (training/telemetry/task_record.py: the wire record, decoded by
its own one decoder, as the state files are).

Unknown kinds and fields are ignored; malformed lines are counted by `EventParser`, never raised.
The collector adds two events of its own, `StreamUp` and `StreamDown`, for a host's agent stream.
Task names arrive as the hosts store them (`ps-0` in ps_bytes and ps_tcp, `worker-1` in the facts) and
leave as the one name (`ps:0`, `worker:1`: task_state.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import orjson

from orchestrator.plan.names import name_of_stem, task_name
from training.telemetry.schema import KIND_HEARTBEAT, KIND_HOST_SAMPLE, KIND_PROGRESS, KIND_TASK_STATE
from training.telemetry.task_record import TaskRecord


@dataclass(frozen=True, slots=True)
class PsBytes:
    pulled: int  # read by the worker from the PS: the PS's outgoing traffic
    pushed: int  # written by the worker to the PS: the PS's incoming traffic


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    t: float
    host: str
    job: str
    task: int
    local_step: int
    global_step: int
    examples: int | None  # None: the program does not say how many examples it uses
    loss: float | None
    interval_s: float | None
    ps_bytes: dict[str, PsBytes] = field(default_factory=dict)
    # parameter-server-strategy: the coordinator's own events (its steps are the workers' steps, which it
    # reports for each worker too: cluster totals count them once, from the workers)
    coordinator: bool = False


@dataclass(frozen=True, slots=True)
class GpuSample:
    index: int
    util_pct: float | None
    mem_used_mb: float | None
    mem_total_mb: float | None
    uuid: str | None = None
    temp_c: float | None = None
    power_w: float | None = None


@dataclass(frozen=True, slots=True)
class PsTcp:
    """A measured task's traffic as its host's supervisor measured it (training/telemetry/traffic.py)."""

    port: int
    bytes_in: int  # monotonic counters, the task's side of every connection it serves or opened
    bytes_out: int
    peers: dict[str, tuple[int, int]] = field(default_factory=dict)  # peer ip -> (in, out)
    in_Bps: float | None = None  # the current rates, smoothed on the host (None: one sample so far)
    out_Bps: float | None = None
    peer_rates: dict[str, tuple[float, float]] = field(default_factory=dict)  # peer ip -> (in, out) B/s
    t: float | None = None  # the host's time of the measurement (None: the sample's)


@dataclass(frozen=True, slots=True)
class TaskFacts:
    """What the host sees of a task's processes (training/telemetry/host_facts.py)."""

    procs: int  # live processes of the task (0: gone)
    cpu_s: float  # CPU seconds they used, a counter
    stopped: bool  # one is stopped (SIGSTOP)
    cpu_moved_at: float | None  # remote time its CPU time last grew
    listening_since: float | None  # remote time its TF server was first seen listening (it has started)
    # GPU index -> MiB its own processes hold there (None: held, amount unknown); None: GPUs not read
    gpu_mem: dict[int, float | None] | None = None


@dataclass(frozen=True, slots=True)
class HostSampleEvent:
    t: float
    host: str
    cpu_pct: float | None
    mem_pct: float | None
    gpus: tuple[GpuSample, ...] = ()
    ps_tcp: dict[str, PsTcp] = field(default_factory=dict)
    tasks: dict[str, TaskFacts] = field(default_factory=dict)
    supervisor_alive: bool | None = None  # None: not known (no supervisor state yet, or an older agent)
    allreduce_tcp: dict[str, PsTcp] = field(default_factory=dict)  # multi-worker-mirrored workers' traffic
    supervisor_state: str | None = None  # its state file's word (None: not known)
    outcome: str | None = None  # the run's outcome as the supervisor decided it
    facts_t: float | None = None  # when the supervisor wrote the facts (tasks, traffic) this sample carries


@dataclass(frozen=True, slots=True)
class HeartbeatEvent:
    t: float
    host: str
    interval_s: float | None = None


@dataclass(frozen=True, slots=True)
class StreamUp:
    """The collector (re)connected the host's agent stream."""

    t: float
    host: str


@dataclass(frozen=True, slots=True)
class StreamDown:
    """The host's agent stream ended or could not be opened."""

    t: float
    host: str
    reason: str = ""


Event = TaskRecord | ProgressEvent | HostSampleEvent | HeartbeatEvent | StreamUp | StreamDown


class Malformed(ValueError):
    pass


# The parser runs once per line of every host (1 000+ lines a second at 1024 tasks): the checks below
# take the common types first (type(v) is float/int: exact, so a bool never passes), then the general ones.


def _num(d: dict[str, Any], key: str, default: float | None = None) -> float | None:
    v = d.get(key, default)
    if v is None:
        return None
    if type(v) is float:
        return v if v - v == 0.0 else None  # inf - inf and nan - nan are nan: not finite
    if type(v) is int:
        f = float(v)
        return f if math.isfinite(f) else None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise Malformed(f"{key} is not a number")
    f = float(v)
    return f if math.isfinite(f) else None


def _int(d: dict[str, Any], key: str, default: int | None = None) -> int | None:
    v = d.get(key, default)
    if v is None or type(v) is int:
        return v
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise Malformed(f"{key} is not a number")
    return int(v)


# Stored name -> the one name, cached: every progress line names every PS, every sample every task.
_NAMES: dict[str, str] = {}  # `worker-1` -> `worker:1` (name_of_stem)
_PS_NAMES: dict[str, str] = {}  # ps_bytes keys: `ps-0`, or a bare PS index (`0`) -> `ps:0`
_NAMES_MAX = 65_536  # a bound, not a size: a run has a few thousand tasks at most


def _name(stored: str, cache: dict[str, str] = _NAMES) -> str:
    name = cache.get(stored)
    if name is None:
        name = task_name("ps", int(stored)) if cache is _PS_NAMES and stored.isdigit() else name_of_stem(stored)
        if len(cache) >= _NAMES_MAX:
            cache.clear()
        cache[stored] = name
    return name


def _ps_bytes(raw: Any) -> dict[str, PsBytes]:
    if not isinstance(raw, dict):
        return {}
    out: dict[str, PsBytes] = {}
    names = _PS_NAMES
    for stored, v in raw.items():  # (a JSON object's keys are strings)
        key = names.get(stored) or _name(stored, names)
        if type(v) is dict:  # (one per PS in every progress line: ints, the common case, as they are)
            pulled, pushed = v.get("pulled", 0), v.get("pushed", 0)
            out[key] = PsBytes(pulled if type(pulled) is int else int(pulled or 0),
                               pushed if type(pushed) is int else int(pushed or 0))
        elif isinstance(v, list | tuple) and len(v) == 2:
            out[key] = PsBytes(int(v[0]), int(v[1]))
    return out


def _gpus(raw: Any) -> tuple[GpuSample, ...]:
    if not isinstance(raw, list):
        return ()
    gpus = []
    for i, g in enumerate(raw):
        if isinstance(g, dict):
            gpus.append(GpuSample(int(g.get("index", i)), _num(g, "util_pct"), _num(g, "mem_used_mb"),
                                  _num(g, "mem_total_mb"), _str(g, "uuid"), _num(g, "temp_c"), _num(g, "power_w")))
    return tuple(gpus)


def _str(d: dict[str, Any], key: str) -> str | None:
    v = d.get(key)
    return v if isinstance(v, str) else None


def _task_facts(raw: Any) -> dict[str, TaskFacts]:
    if not isinstance(raw, dict):
        return {}
    out: dict[str, TaskFacts] = {}
    for name, v in raw.items():
        if isinstance(v, dict):
            out[_name(str(name))] = TaskFacts(int(v.get("procs", 0) or 0), float(v.get("cpu_s", 0.0) or 0.0),
                                       v.get("stopped") is True, _num(v, "cpu_moved_at"), _num(v, "listening_since"),
                                       _gpu_mem(v.get("gpu_mem")))
    return out


def _gpu_mem(raw: Any) -> dict[int, float | None] | None:
    if not isinstance(raw, dict):
        return None
    return {int(k): _num(raw, k) for k in raw if str(k).isdigit()}


def _ps_tcp(raw: Any) -> dict[str, PsTcp]:
    if not isinstance(raw, dict):
        return {}
    out: dict[str, PsTcp] = {}
    for name, v in raw.items():
        if not isinstance(v, dict):
            continue
        peers: dict[str, tuple[int, int]] = {}
        rates: dict[str, tuple[float, float]] = {}
        for ip, pv in (v.get("peers") or {}).items():
            if isinstance(pv, dict):
                peers[str(ip)] = (int(pv.get("bytes_in", 0)), int(pv.get("bytes_out", 0)))
                rin, rout = _num(pv, "in_Bps"), _num(pv, "out_Bps")
                if rin is not None and rout is not None:
                    rates[str(ip)] = (rin, rout)
        out[_name(str(name))] = PsTcp(int(v.get("port", 0)), int(v.get("bytes_in", 0)), int(v.get("bytes_out", 0)),
                                             peers, _num(v, "in_Bps"), _num(v, "out_Bps"), rates, _num(v, "t"))
    return out


def from_dict(d: dict[str, Any]) -> Event | None:
    """A typed event, None for a kind this version does not know; Malformed for a broken known event."""
    kind = d.get("kind")
    t = _num(d, "t")
    host = d.get("host")
    if t is None or not isinstance(host, str) or not isinstance(kind, str):
        raise Malformed("missing t/host/kind")
    try:
        if kind == KIND_TASK_STATE:
            return TaskRecord.from_json(d)  # the one decoder of a task's record (also its state file's)
        if kind == KIND_PROGRESS:
            job, task = d.get("job"), _int(d, "task")
            if not isinstance(job, str) or task is None:
                raise Malformed("task event without job/task")
            return ProgressEvent(t, host, job, task, _int(d, "local_step", 0) or 0, _int(d, "global_step", 0) or 0,
                                 _int(d, "examples"), _num(d, "loss"), _num(d, "interval_s"),
                                 _ps_bytes(d.get("ps_bytes")), d.get("coordinator") is True)
        if kind == KIND_HOST_SAMPLE:
            supervisor = d.get("supervisor")
            sup = supervisor if isinstance(supervisor, dict) else {}
            alive = sup.get("alive")
            return HostSampleEvent(t, host, _num(d, "cpu_pct"), _num(d, "mem_pct"), _gpus(d.get("gpus")),
                                   _ps_tcp(d.get("ps_tcp")), _task_facts(d.get("tasks")),
                                   alive if isinstance(alive, bool) else None, _ps_tcp(d.get("allreduce_tcp")),
                                   _str(sup, "state"), _str(sup, "outcome"), _num(d, "facts_t"))
        if kind == KIND_HEARTBEAT:
            return HeartbeatEvent(t, host, _num(d, "interval_s"))
    except (TypeError, ValueError, AttributeError) as exc:
        raise Malformed(str(exc)) from exc
    return None


def _loads(line: str | bytes) -> Any:
    """The line's JSON value, None for a blank line. orjson (about 3x json's speed: the parser runs for
    every line of every host) first; what it refuses goes through json, which is what the lines are
    written with and accepts more (NaN, Infinity: `_num` makes them None; bytes that are not UTF-8)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
        text = text.strip()
        return json.loads(text) if text else None


@dataclass
class EventParser:
    """Parses lines, counting the ones it cannot use. Never raises."""

    malformed: int = 0
    unknown: int = 0

    def parse(self, line: str | bytes) -> Event | None:
        try:
            d = _loads(line)
            if d is None:
                return None
            if not isinstance(d, dict):
                raise Malformed("not an object")
            ev = from_dict(d)
        except (ValueError, RecursionError):  # json.JSONDecodeError and Malformed are ValueErrors
            self.malformed += 1
            return None
        if ev is None:
            self.unknown += 1
        return ev
