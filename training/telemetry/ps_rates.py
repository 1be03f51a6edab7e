"""Measured PS traffic kept on the host, so that ONE read of the host tells it (`status`, `dash --once`).

The supervisor samples its PS tasks' kernel TCP counters with its facts, about once a second (the same
counters the agent reads: training/agent/tcp.py, `ss -tinpH`), and keeps in `state/host-<host>.facts`:

    "ps_tcp": {"ps-0": {"port": P, "bytes_in": N, "bytes_out": N,      # monotonic, since the first sample
                        "in_Bps": r, "out_Bps": r,                     # smoothed as the dashboard smooths
                        "last_in_Bps": r, "last_out_Bps": r, "dt_s": s,  # over the last interval alone
                        "peers": {ip: {"in": N, "out": N, "in_Bps": r, "out_Bps": r}}}}

`in_Bps`/`out_Bps` are the per-interval rates smoothed with the reducer's own EMA and time constant
(orchestrator/monitor/views.py `ema`, EMA_TAU_S: a test holds the two equal), so a one-off read prints
what the live dashboard shows from the agent's samples; a peer's rate is its last interval's, as the
dashboard shows peers. A task has no rate before its second sample (the first only sets the baseline).
The clock is a parameter (`clock`: monotonic). Stdlib only.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..agent.tcp import PsCounters, TcpConn, read_tcp
from ..run.layout import RUN_DIR_ENV
from .task_cpu import TASK_ID_ENV

EMA_TAU_S = 3.0  # = orchestrator.monitor.views.EMA_TAU_S: the same smoothing as the live dashboard's

Reader = Callable[[Iterable[int], Iterable[int]], list[TcpConn]]


def read_unmarked(ports: Iterable[int], peer_ports: Iterable[int]) -> list[TcpConn]:
    """`ss` without the run's markers: it is no process of the run (`stop` and `status` count those)."""
    env = {k: v for k, v in os.environ.items() if k not in (RUN_DIR_ENV, TASK_ID_ENV)}
    return read_tcp(ports, peer_ports, env=env)


def ema(previous: float | None, value: float, dt: float, tau: float = EMA_TAU_S) -> float:
    """The reducer's EMA (orchestrator/monitor/views.py), here because training/ imports no orchestrator."""
    if previous is None:
        return value
    return previous + (1.0 - math.exp(-max(dt, 0.0) / tau)) * (value - previous)


def ps_ports(plan: dict[str, Any], host: str) -> tuple[dict[str, int], set[int]]:
    """This host's PS tasks (`ps-N` -> port) and every other task's port, from a plan (run.json's)."""
    ps: dict[str, int] = {}
    others: set[int] = set()
    for t in plan.get("tasks", []):
        if t.get("port") is None:
            continue
        if t.get("job") == "ps" and t.get("host") == host:
            ps[f"ps-{t.get('index')}"] = int(t["port"])
        else:
            others.add(int(t["port"]))
    return ps, others


class PsRates:
    """Each PS task's counters (PsCounters) and their rate between consecutive samples."""

    def __init__(self, ports: dict[str, int], peer_ports: set[int], read: Reader = read_unmarked,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.counters = PsCounters(dict(ports), set(peer_ports))
        self.read = read
        self.clock = clock  # read as soon as the counters are: a late stamp would skew the interval's rate
        self._t: float | None = None  # the previous sample's time
        self._prev: dict[str, Any] = {}  # the previous snapshot
        self._smooth: dict[str, tuple[float, float]] = {}  # name -> smoothed (in, out)
        self._last: dict[str, dict[str, Any]] = {}  # name -> its entry as last written

    @classmethod
    def for_plan(cls, plan: dict[str, Any], host: str) -> PsRates:
        return cls(*ps_ports(plan, host))

    def sample(self) -> dict[str, Any]:
        """Read the counters and the clock, and return the facts' `ps_tcp` ({}: no PS task on this host)."""
        if not self.counters.ports:
            return {}  # no `ss` run on a host without a PS
        self.counters.update(self.read(self.counters.ports.values(), self.counters.peer_ports))
        now = self.clock()
        snap = self.counters.snapshot()
        prev_t, self._t = self._t, now
        if prev_t is None or now <= prev_t:
            self._prev = snap  # the baseline (or a clock that did not move: no rate from it)
            return {name: {**entry, **self._rates_of(name)} for name, entry in snap.items()}
        dt = now - prev_t
        out: dict[str, Any] = {}
        for name, entry in snap.items():
            before = self._prev.get(name, {"bytes_in": 0, "bytes_out": 0, "peers": {}})
            rin = (entry["bytes_in"] - before["bytes_in"]) / dt
            rout = (entry["bytes_out"] - before["bytes_out"]) / dt
            old = self._smooth.get(name)
            sin, sout = ema(old[0] if old else None, rin, dt), ema(old[1] if old else None, rout, dt)
            self._smooth[name] = (sin, sout)
            peers = {ip: {**v, "in_Bps": _rate(v["in"], before["peers"].get(ip, {}).get("in", 0), dt),
                          "out_Bps": _rate(v["out"], before["peers"].get(ip, {}).get("out", 0), dt)}
                     for ip, v in entry["peers"].items()}
            self._last[name] = {"in_Bps": _r(sin), "out_Bps": _r(sout), "last_in_Bps": _r(rin),
                                "last_out_Bps": _r(rout), "dt_s": round(dt, 3)}
            out[name] = {**entry, **self._last[name], "peers": peers}
        self._prev = snap
        return out

    def _rates_of(self, name: str) -> dict[str, Any]:
        return self._last.get(name, {})


def _rate(now_bytes: int, before: int, dt: float) -> float:
    return _r(max(now_bytes - before, 0) / dt)


def _r(x: float) -> float:
    return round(x, 1)
