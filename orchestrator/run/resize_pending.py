"""A resize's new hosts, in the run record before they are launched, so that nothing of a run is ever
where its record does not say (issue 37: a `tfcluster resize` killed half-way left orphans no `stop` found).

Transitions of `RunRecord.pending_resize` (saved by orchestrator/run/resize.py, atomically and 0600 as
records.save writes every record):
- `mark`: the new hosts are prepared, about to be launched: the record keeps its plan and hosts (the run
  as it was) and gains the new plan and the new hosts' run dirs;
- `keep_only`: the resize was undone: what was verified stopped is dropped (no pending left when all was),
  so a later `stop` still visits a new host whose stop could not be verified;
- the resize succeeded: resize.py clears it as it replaces the plan and hosts.
`probe` gives `stop` (orchestrator/run/stop.py) a record of just the pending hosts, under the new plan,
whose host settings say how to reach them. A record without the key (before this field) has none pending.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from orchestrator.errors import UsageError
from orchestrator.run import records

if TYPE_CHECKING:
    from orchestrator.plan.model import ClusterPlan


def mark(record: records.RunRecord, plan: ClusterPlan, run_dirs: dict[str, str]) -> None:
    """The new hosts (name -> run dir on it) are about to run tasks of `plan`: `stop` must visit them."""
    hosts = [records.HostRecord(name=n, workdir=plan.host(n).workdir, run_dir=d, python=plan.host(n).python,
                                started=True) for n, d in run_dirs.items()]
    record.pending_resize = {"at": time.time(), "pid": os.getpid(), "machine": socket.gethostname(),
                             "plan": plan.to_json(compact=True), "hosts": [vars(h).copy() for h in hosts]}


def keep_only(record: records.RunRecord, names: Iterable[str]) -> None:
    """Only these pending hosts stay pending (those whose stop was not verified); none left: no pending."""
    if record.pending_resize is None:
        return
    kept = set(names)
    hosts = [h for h in record.pending_resize.get("hosts", []) if isinstance(h, dict) and h.get("name") in kept]
    record.pending_resize = {**record.pending_resize, "hosts": hosts} if hosts else None


def probe(record: records.RunRecord) -> records.RunRecord | None:
    """The pending hosts as a record of their own (for stop_hosts), or None when none is pending. A pending
    entry that does not decode is a UsageError (one line): `stop` must not silently skip a host."""
    from orchestrator.plan.model import ClusterPlan  # as records decodes plans: not at import (`ls` is quick)

    pending = record.pending_resize
    if not pending:
        return None
    try:
        plan = ClusterPlan.from_json(pending["plan"])
        hosts = [records.decode_host(h) for h in pending["hosts"]]
    except (KeyError, TypeError, ValueError) as exc:  # PlanDecodeError, RecordError: ValueErrors
        raise UsageError(f"run {record.run_id}: its pending resize: {type(exc).__name__}: {exc}") from None
    return dataclasses.replace(record, plan=plan, hosts=hosts, pending_resize=None) if hosts else None


def pending_hosts(record: records.RunRecord) -> list[str]:
    """The names of the hosts a half-done resize may have left running tasks on ([] when none)."""
    pending = record.pending_resize or {}
    return [str(h.get("name")) for h in pending.get("hosts", []) if isinstance(h, dict)]


def under_way(record: records.RunRecord) -> str:
    """"" when no resize is pending; else one line: which process, whether it still runs, what to do."""
    pending = record.pending_resize
    if not pending:
        return ""
    pid, machine = pending.get("pid"), pending.get("machine", "")
    alive = isinstance(pid, int) and records.shown_status("starting", pid, str(machine)) == "starting"
    how = f"under way (process {pid} on {machine})" if alive else "interrupted"
    return (f"a resize of run {record.run_id} is {how}: hosts {', '.join(pending_hosts(record))} may run tasks "
            f"of it; `tfcluster stop {record.run_id}` stops them too")
