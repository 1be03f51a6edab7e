"""Measured task traffic: what the kernel saw a PS task (or, in multi-worker-mirrored mode, a worker)
send and receive, as monotonic byte counters and smoothed rates, per task and per peer address.

The supervisor of a host that runs such a task keeps a `TaskTraffic` and samples it each time it writes
its facts (training/telemetry/host_facts.py, once a second); the facts file then carries, under
`ps_tcp` (or `allreduce_tcp`), for each measured task by its file stem (`ps-0`):

    {"port": 23000, "t": <host time of the sample>, "bytes_in": n, "bytes_out": m,
     "in_Bps": r, "out_Bps": r, "peers": {"10.0.0.2": {"bytes_in": n, "bytes_out": m, "in_Bps": r, "out_Bps": r}}}

so one read of the host (`status`, `dash --once`) has the current rate, and the dashboard's agent
forwards the same numbers: every view shows the host's one measurement. Rates are null until two
samples exist.

A task's traffic flows on two kinds of connections: those its server accepts (local port = its port)
and those its process opens to other tasks' ports (TensorFlow's RecvTensor is issued by the receiver,
so a PS pulls the gradients it applies from the workers' servers). The second kind is told from other
processes' by the socket's inode: the task's own processes' fds are read (/proc/<pid>/fd) only when a
connection to a peer port appears whose owner is not known yet, and each answer is kept while the
connection lives. The kernel's counters live and die with each connection, so each sample adds what
moved on each connection since it was last seen (a new one counts from zero; the first sample only
sets the baseline). Stdlib only.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from .tcp_diag import TcpConn, TcpDiag

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

EMA_TAU_S = 3.0  # the rates' smoothing time constant (the dashboard's step rates use the same)
PS_KEY, ALLREDUCE_KEY = "ps_tcp", "allreduce_tcp"  # where the facts file (and host_sample) carries them
TRAFFIC_KEYS = (PS_KEY, ALLREDUCE_KEY)


def smooth(previous: float | None, value: float, dt: float, tau: float = EMA_TAU_S) -> float:
    """An exponential moving average with a time constant, so uneven sample spacing smooths evenly."""
    if previous is None:
        return value
    return previous + (1.0 - math.exp(-max(dt, 0.0) / tau)) * (value - previous)


def measured_tasks(plan: dict[str, Any], host: str) -> tuple[str, dict[str, int], set[int]] | None:
    """Which of this host's tasks are measured, from the plan: (facts key, task stem -> its port, the
    other tasks' ports); None when none is. The PS tasks; in multi-worker-mirrored mode (no PS), the
    workers and the chief, whose traffic is the all-reduce between them."""
    allreduce = plan.get("mode") == "multi-worker-mirrored"
    mine: dict[str, int] = {}
    others: set[int] = set()
    for t in plan.get("tasks", []):
        if t.get("port") is None or t.get("in_cluster", True) is False:
            continue
        measured = t.get("job") in ("worker", "chief") if allreduce else t.get("job") == "ps"
        if measured and t.get("host") == host:
            mine[f"{t.get('job')}-{t.get('index')}"] = int(t["port"])
        else:
            others.add(int(t["port"]))
    if not mine:
        return None
    return (ALLREDUCE_KEY if allreduce else PS_KEY), mine, others


def socket_inodes(pids: Iterable[int], proc: str = "/proc") -> set[int]:
    """The inodes of the sockets these processes hold open."""
    inodes: set[int] = set()
    for pid in pids:
        fd_dir = f"{proc}/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue  # gone, or not ours to read
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return inodes


class _Counter:
    """One task's (or one peer's) bytes so far and smoothed rates."""

    __slots__ = ("bytes_in", "bytes_out", "in_Bps", "out_Bps")

    def __init__(self) -> None:
        self.bytes_in = self.bytes_out = 0
        self.in_Bps: float | None = None
        self.out_Bps: float | None = None

    def add(self, d_in: int, d_out: int) -> None:
        self.bytes_in += d_in
        self.bytes_out += d_out

    def rate(self, before: tuple[int, int], dt: float) -> None:
        self.in_Bps = smooth(self.in_Bps, (self.bytes_in - before[0]) / dt, dt)
        self.out_Bps = smooth(self.out_Bps, (self.bytes_out - before[1]) / dt, dt)

    def to_json(self) -> dict[str, Any]:
        return {"bytes_in": self.bytes_in, "bytes_out": self.bytes_out, "in_Bps": _r(self.in_Bps),
                "out_Bps": _r(self.out_Bps)}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


class TaskTraffic:
    """`sample(now, pids_of)` reads the kernel once and returns the facts' entry for every measured task."""

    def __init__(self, key: str, ports: dict[str, int], peer_ports: set[int], proc: str = "/proc",
                 diag: TcpDiag | None = None) -> None:
        self.key = key  # PS_KEY or ALLREDUCE_KEY
        self.ports = ports  # task stem -> its server's port
        self.peer_ports = sorted(peer_ports - set(ports.values()))
        self.proc = proc
        self.diag = diag if diag is not None else TcpDiag()
        self.tasks = {name: _Counter() for name in ports}
        self.peers: dict[str, dict[str, _Counter]] = {name: {} for name in ports}
        self._by_port = {port: name for name, port in ports.items()}
        self._last: dict[tuple[int, str, int], tuple[int, int]] | None = None  # per connection: in, out
        self._owner: dict[int, str | None] = {}  # socket inode -> measured task (None: another process's)
        self._t: float | None = None

    @classmethod
    def for_plan(cls, plan: dict[str, Any], host: str, proc: str = "/proc") -> TaskTraffic | None:
        measured = measured_tasks(plan, host)
        return None if measured is None else cls(*measured, proc=proc)

    def _owners(self, conns: list[TcpConn], pids_of: Callable[[str], list[int]]) -> None:
        """Learn who owns each new connection to a peer port (one fd walk of the measured tasks' processes,
        only when such a connection appeared); forget the connections that closed."""
        outgoing = {c.inode for c in conns if c.local_port not in self._by_port}
        self._owner = {inode: who for inode, who in self._owner.items() if inode in outgoing}
        unknown = outgoing - self._owner.keys()
        if not unknown:
            return
        walked = True
        for name in self.ports:
            pids = pids_of(name)
            walked = walked and bool(pids)
            for inode in socket_inodes(pids, self.proc) & unknown:
                self._owner[inode] = name
        if walked:  # (a task whose process is not known yet may own the rest: ask again next time)
            for inode in unknown - self._owner.keys():
                self._owner[inode] = None

    def sample(self, now: float, pids_of: Callable[[str], list[int]]) -> dict[str, Any]:
        conns = self.diag.read(list(self.ports.values()), self.peer_ports)
        if not self.diag.families:
            return {}  # the kernel refused every request: unknown, not zero (views then show no rate)
        self._owners(conns, pids_of)
        before = {name: (c.bytes_in, c.bytes_out) for name, c in self.tasks.items()}
        peers_before = {(n, ip): (c.bytes_in, c.bytes_out) for n, ps in self.peers.items() for ip, c in ps.items()}
        seen: dict[tuple[int, str, int], tuple[int, int]] = {}
        for c in conns:
            name = self._by_port.get(c.local_port) or self._owner.get(c.inode)
            if name is None:
                continue
            key = (c.local_port, c.peer_ip, c.peer_port)
            seen[key] = (c.bytes_in, c.bytes_out)
            if self._last is None:
                continue  # the first sample: the baseline
            last_in, last_out = self._last.get(key, (0, 0))
            d_in, d_out = max(c.bytes_in - last_in, 0), max(c.bytes_out - last_out, 0)
            self.tasks[name].add(d_in, d_out)
            self.peers[name].setdefault(c.peer_ip, _Counter()).add(d_in, d_out)
        if self._last is not None and self._t is not None and now > self._t:
            dt = now - self._t
            for name, counter in self.tasks.items():
                counter.rate(before[name], dt)
                for ip, peer in self.peers[name].items():
                    peer.rate(peers_before.get((name, ip), (0, 0)), dt)
        self._last, self._t = seen, now
        return {name: {"port": self.ports[name], "t": now, **counter.to_json(),
                       "peers": {ip: p.to_json() for ip, p in self.peers[name].items()}}
                for name, counter in self.tasks.items()}

    def close(self) -> None:
        self.diag.close()
