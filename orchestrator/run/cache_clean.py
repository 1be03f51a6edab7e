"""Clean the hosts' content caches after `stop --purge`: what no run dir left in a workdir uses goes
(training/run/cache_gc.py, sent as the source of `python -S -c` and run in the host's workdir).

So the cache stops growing: purging a run frees what only it used, purging the last run of a workdir
frees the whole cache, and a run still there keeps what it was built from. One command per distinct
(address, workdir); hosts that share storage under different addresses each clean it, one at a time
(the cache's lock). A start holding the cache makes the host answer `busy` (nothing removed): a later
purge cleans. Best effort: a failure here never makes the purge fail.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.plan.model import HostPlan
from orchestrator.run.inline_source import standalone_source
from orchestrator.transport.base import remote_path
from orchestrator.transport.factory import Opener, transport_for
from orchestrator.transport.fan_out import fan_out

CLEAN_SOURCE = standalone_source("training.run.cache_gc")


@dataclass(frozen=True)
class CacheClean:
    """One host's cache cleaning: the files and bytes freed, or why nothing was."""

    host: str
    files: int = 0
    bytes: int = 0
    busy: bool = False  # a start held the cache: nothing removed
    error: str | None = None


def clean_command(host: HostPlan) -> str:
    """In the workdir (none: nothing to clean), the cleaner under the host's python, with -S (stdlib only)."""
    wd = remote_path(host.workdir)
    return (f"umask 077\ncd {wd} 2>/dev/null || {{ echo '@cleaned 0 0'; exit 0; }}\n"
            f"exec {remote_path(host.python)} -S -c {shlex.quote(CLEAN_SOURCE)}")


def parse(host: str, stdout: str, stderr: str) -> CacheClean:
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith("@")), "")
    word, *rest = line.split() or [""]
    if word == "@cleaned" and len(rest) == 2 and all(r.isdigit() for r in rest):
        return CacheClean(host, files=int(rest[0]), bytes=int(rest[1]))
    if word == "@busy":
        return CacheClean(host, busy=True)
    why = line.removeprefix("@error ") or (stderr.strip().splitlines() or ["no answer"])[-1]
    return CacheClean(host, error=why)


def clean_caches(hosts: Iterable[HostPlan], *, timeout: float = 60.0,
                 opener: Opener = transport_for) -> dict[str, CacheClean]:
    """Clean the cache of every distinct (address, workdir) of `hosts`; {host name: what it freed}."""
    by_place: dict[tuple[str, str], HostPlan] = {}
    for h in hosts:
        by_place.setdefault((h.address, h.workdir), h)
    targets = {h.name: h for h in by_place.values()}

    def one(name: str) -> CacheClean:
        transport = opener(targets[name])
        try:
            result = transport.run_shell(clean_command(targets[name]), timeout=timeout)
        finally:
            transport.close()
        return parse(name, result.stdout, result.stderr)

    return {name: res if isinstance(res, CacheClean) else CacheClean(name, error=res.one_line())
            for name, res in fan_out(list(targets), one).items()}

