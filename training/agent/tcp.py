"""Measured PS traffic: the kernel's per-connection TCP counters (`ss -tinpH`), turned into monotonic
per-PS-task and per-peer byte counts (`PsCounters`), for the agent's `host_sample.ps_tcp`."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

_ADDR_RE = re.compile(r"^\[?(?P<ip>.*?)\]?:(?P<port>\d+|\*)$")
_COUNTER_RE = re.compile(r"\b(bytes_acked|bytes_received):(\d+)")
_PID_RE = re.compile(r"\bpid=(\d+)")


def _split_addr(addr: str) -> tuple[str, int]:
    m = _ADDR_RE.match(addr)
    if not m:
        raise ValueError(addr)
    ip = m.group("ip")
    if ip.startswith("::ffff:"):
        ip = ip[len("::ffff:"):]  # IPv4 peers of a dual-stack listener (TF's gRPC listens on [::])
    ip = ip.split("%", 1)[0]
    return ip, int(m.group("port")) if m.group("port") != "*" else 0


@dataclass(frozen=True)
class TcpConn:
    local_port: int
    peer_ip: str
    peer_port: int
    bytes_out: int  # bytes_acked: sent and acknowledged by the peer
    bytes_in: int  # bytes_received
    pid: int | None = None  # owning process (ss -p), when ss may show it


def parse_ss(output: str) -> list[TcpConn]:
    """Parse `ss -tin[p]H state established ...`: an address line (with `users:((...pid=N...))` under -p),
    then an indented line of counters."""
    conns: list[TcpConn] = []
    current: tuple[int, str, int, int | None] | None = None
    for line in output.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            fields = line.split()
            # With a state filter ss omits the State column: Recv-Q Send-Q Local Peer [Process]
            addrs = [f for f in fields if ":" in f and not f.startswith("users:")]
            current = None
            if len(addrs) >= 2:
                try:
                    _, lport = _split_addr(addrs[0])
                    pip, pport = _split_addr(addrs[1])
                    pid = _PID_RE.search(line)
                    current = (lport, pip, pport, int(pid.group(1)) if pid else None)
                except ValueError:
                    current = None
            continue
        if current is None:
            continue
        counters = dict(_COUNTER_RE.findall(line))
        conns.append(TcpConn(current[0], current[1], current[2], int(counters.get("bytes_acked", 0)),
                             int(counters.get("bytes_received", 0)), current[3]))
        current = None
    return conns


@dataclass
class PsCounters:
    """Monotonic per-PS-task and per-peer byte counters built from per-connection deltas.

    A PS task's traffic flows on two kinds of connections: those its server accepts (local port = the PS
    port: workers' requests) and those the PS process opens itself to other tasks' ports (TensorFlow's
    RecvTensor is issued by the receiver, so a PS pulls the gradients it applies from the workers'
    servers). The second kind is attributed by owning pid (`ss -p`), learnt from the first kind.

    The kernel's counters live and die with each connection; summing them would go backwards when a
    connection closes. So each sample adds, per connection, what moved since that connection was last
    seen (a new connection counts from zero: it opened since the previous sample). The first sample only
    sets the baseline. Bytes a connection moved between its last sample and its close are not seen."""

    ports: dict[str, int]  # PS task name -> port
    peer_ports: set[int] = field(default_factory=set)  # other tasks' ports the PS may connect to
    _last: dict[tuple[int, str, int], tuple[int, int]] = field(default_factory=dict)
    totals: dict[str, list[int]] = field(default_factory=dict)  # name -> [in, out]
    peers: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    pids: dict[int, str] = field(default_factory=dict)  # PS process pid -> task name
    _baselined: bool = False

    def update(self, conns: Iterable[TcpConn]) -> None:
        conns = list(conns)
        by_port = {p: n for n, p in self.ports.items()}
        for c in conns:
            if c.local_port in by_port and c.pid is not None:
                self.pids[c.pid] = by_port[c.local_port]
        seen: dict[tuple[int, str, int], tuple[int, int]] = {}
        for c in conns:
            name = by_port.get(c.local_port)
            if name is None and c.peer_port in self.peer_ports and c.pid is not None:
                name = self.pids.get(c.pid)
            if name is None:
                continue
            key = (c.local_port, c.peer_ip, c.peer_port)
            seen[key] = (c.bytes_in, c.bytes_out)
            if not self._baselined:
                continue
            last_in, last_out = self._last.get(key, (0, 0))
            d_in, d_out = max(c.bytes_in - last_in, 0), max(c.bytes_out - last_out, 0)
            tot = self.totals.setdefault(name, [0, 0])
            tot[0] += d_in
            tot[1] += d_out
            peer = self.peers.setdefault(name, {}).setdefault(c.peer_ip, [0, 0])
            peer[0] += d_in
            peer[1] += d_out
        self._last = seen
        self._baselined = True

    def snapshot(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, port in self.ports.items():
            tot = self.totals.get(name, [0, 0])
            out[name] = {"port": port, "bytes_in": tot[0], "bytes_out": tot[1],
                         "peers": {ip: {"in": v[0], "out": v[1]} for ip, v in self.peers.get(name, {}).items()}}
        return out


def ss_command(ports: Iterable[int], peer_ports: Iterable[int] = ()) -> list[str]:
    terms = [f"sport = :{p}" for p in sorted(ports)] + [f"dport = :{p}" for p in sorted(peer_ports)]
    return ["ss", "-tinpH", "state", "established", f"( {' or '.join(terms)} )"]


def read_tcp(ports: Iterable[int], peer_ports: Iterable[int] = ()) -> list[TcpConn]:
    ports = list(ports)
    if not ports or shutil.which("ss") is None:
        return []
    try:
        res = subprocess.run(ss_command(ports, peer_ports), check=False, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_ss(res.stdout) if res.returncode == 0 else []
