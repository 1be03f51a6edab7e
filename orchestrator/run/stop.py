"""`stop` (and `--purge`): stop a run on every host and verify that no process of it is left.

Every host is visited at once (transport.fan_out); a host that cannot be reached is reported in the
result (ok=False, error) and the record keeps saying where the run may live, so a later `stop` finds
it again. The work on each host is ONE command that starts no Python there (orchestrator/run/sh_stop.py:
the supervisor's SIGTERM, grace, then SIGKILL of every process carrying the run's marker, then a fresh
look at the host's processes, then the run dir removed if nothing is left): the verdict comes from what
that last look sees running, never from what was signalled. After a purge, the content cache of each
purged host's workdir is cleaned of what no run left there uses (orchestrator/run/cache_clean.py).
A resize's pending new hosts (orchestrator/run/resize_pending.py) are stopped too, under the plan they joined.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from orchestrator.run import records, resize_pending, slurm_end
from orchestrator.run.cache_clean import CacheClean, clean_caches
from orchestrator.run.remote import RemoteRun, with_retry
from orchestrator.transport.factory import Opener, transport_for
from orchestrator.transport.fan_out import fan_out
from training.telemetry.state_files import RunProcess


@dataclass
class HostStop:
    host: str
    ok: bool
    absent: bool = False  # no run dir there (never prepared, or purged)
    killed: list[int] = field(default_factory=list)
    remaining: list[RunProcess] = field(default_factory=list)  # seen running after the stop
    purged: bool = False
    error: str | None = None
    reason: str | None = None  # the HostError's reason word when the host's stop failed
    unsure: str = ""  # why `remaining` may not be all: then nobody may say "none left" (sh_stop.py)
    cache: CacheClean | None = None  # after a purge: what cleaning the workdir's content cache freed


def stop_hosts(record: records.RunRecord, names: Iterable[str], *, grace: float = 10.0, timeout: float = 30.0,
               purge: bool = False, opener: Opener = transport_for) -> dict[str, HostStop]:
    targets = [n for n in names if record.host(n).run_dir]
    plan_hosts = {h.name: h for h in record.plan.hosts}
    run_dirs = {h.name: h.run_dir for h in record.hosts}

    def one(name: str) -> HostStop:
        remote = RemoteRun(plan_hosts[name], run_dirs[name], opener)
        try:
            verdict = with_retry(name, lambda: remote.stop(grace, timeout, purge=purge),
                                 time.monotonic() + timeout + grace)
        finally:
            remote.close()
        if verdict.report.absent:
            return HostStop(name, ok=True, absent=True, purged=verdict.purged)
        remaining = list(verdict.report.remaining)
        return HostStop(name, ok=not remaining, killed=list(verdict.report.killed), remaining=remaining,
                        purged=verdict.purged, unsure=verdict.report.unsure)

    return {name: res if isinstance(res, HostStop) else HostStop(name, ok=False, error=res.one_line(), reason=res.reason)
            for name, res in fan_out(targets, one, shardable=True).items()}


def stop(record: records.RunRecord, *, grace: float = 10.0, timeout: float = 30.0, purge: bool = False,
         opener: Opener = transport_for) -> dict[str, HostStop]:
    """Stop the run everywhere, verify nothing of it remains; idempotent. Unreachable hosts are
    reported in the result (ok=False, error) and the record keeps saying where the run may live. A Slurm
    run's job is then cancelled (run.slurm_end: its state and reason in the record)."""
    job = slurm_end.look(record)
    if job is not None:
        opener = slurm_end.opener_for(record, job)
    pending = resize_pending.probe(record)
    result = stop_hosts(record, [h.name for h in record.hosts], grace=grace, timeout=timeout, purge=purge,
                        opener=opener)
    if pending is not None:  # a resize's new hosts, launched or about to be: never left running unseen
        result.update(stop_hosts(pending, [h.name for h in pending.hosts], grace=grace, timeout=timeout,
                                 purge=purge, opener=opener))
    if job is not None and not job.ended:
        record.notes.append(slurm_end.cancel(record, slurm_end.STOPPED))
    if all(r.ok for r in result.values()):
        record.status = "purged" if purge else "stopped"
    records.save(record)
    if purge and all(r.ok for r in result.values()):
        records.remove(record.run_id)
    if purge and job is None:  # a Slurm run's nodes are not reachable once its job is cancelled
        known = {h.name for h in record.plan.hosts}
        joined = [h for h in pending.plan.hosts if h.name not in known] if pending else []
        purged = [h for h in (*record.plan.hosts, *joined) if h.name in result and result[h.name].ok]
        for name, cleaned in clean_caches(purged, timeout=timeout, opener=opener).items():
            result[name].cache = cleaned
    return result
