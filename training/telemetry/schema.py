"""The telemetry event contract (DESIGN.md "Telemetry events"). Stdlib only.

Every event: `v` (schema version), `t` (unix seconds), `host`, `kind`; task events add `job`, `task`.
Consumers ignore unknown kinds and fields and count malformed lines instead of failing.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # typing costs the supervisor's start-up time on every host
    from typing import Any

SCHEMA_VERSION = 1

KIND_TASK_STATE = "task_state"  # a TaskRecord (training/telemetry/task_record.py: its fields and meaning)
KIND_PROGRESS = "progress"  # local_step, global_step, examples, loss, interval_s, ps_bytes
# progress field meanings (consumers rely on them): local_step and examples are cumulative counts for this
# task process (examples/s = delta examples / delta t); interval_s = seconds since the previous progress event;
# ps_bytes = {"ps-0": {"pulled": int, "pushed": int}, ...}: bytes this task read from / wrote to each PS task
# during that interval (accounted from variable sizes and placement).
# host_sample.ps_tcp = {"ps-0": {"port": int, "t": float, "bytes_in": int, "bytes_out": int, "in_Bps": float|null,
# "out_Bps": float|null, "peers": {ip: {"bytes_in", "bytes_out", "in_Bps", "out_Bps"}}}}: what the PS host's
# supervisor measured from the kernel (training/telemetry/traffic.py), forwarded from its facts file:
# monotonic byte counters and their smoothed rates, PS side: the connections the PS server accepts on its
# port and the ones the PS process opens to other tasks' ports (TensorFlow's RecvTensor is issued by the
# receiver, so gradients reach a PS over connections the PS opened). `allreduce_tcp`: the same for each
# multi-worker-mirrored worker.
# host_sample.tasks and supervisor come from the supervisor's facts file (host_facts.py), and facts_t is when
# it wrote them (the host's time): counters in them (tasks' cpu_s, ps_tcp) were read then, not at `t`.
# heartbeat carries interval_s (the agent's sampling interval).
KIND_HOST_SAMPLE = "host_sample"  # cpu_pct, mem_pct, gpus, ps_tcp
KIND_HEARTBEAT = "heartbeat"


def make_event(kind: str, host: str, *, job: str | None = None, task: int | None = None,
               t: float | None = None, **fields: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"v": SCHEMA_VERSION, "t": time.time() if t is None else t, "host": host, "kind": kind}
    if job is not None:
        event["job"] = job
        event["task"] = task
    event.update(fields)
    return event


def dumps(event: dict[str, Any]) -> str:
    """One JSON line, no embedded newlines, UTF-8 safe."""
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False)
