"""Per-host telemetry agent: `python -m training.agent --run-dir R --host NAME --interval 1`.

Streams JSON lines on stdout for the orchestrator's collector (one SSH channel per host):
- every new line of the run's `events/*.jsonl` files (tailed; files that appear later are picked up,
  a partial last line waits until it is complete),
- a `host_sample` every interval: CPU and memory (psutil, else /proc), GPUs (nvidia-smi where present),
  and `ps_tcp`: bytes in/out per local PS task port and per peer, measured from the kernel's TCP
  counters (`ss -tinH`),
- a `heartbeat` every interval (first thing at start, so the collector learns the clock offset).

It stops on SIGTERM/SIGHUP/SIGINT, when stdout is closed (the SSH channel went away: the next write
fails), or, with --exit-on-stdin-eof, when stdin reaches EOF. Stdlib only; psutil is optional.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

from training.layout import RUN_FILE
from training.telemetry.schema import KIND_HEARTBEAT, KIND_HOST_SAMPLE, dumps, make_event

BACKLOG_BYTES = 256 * 1024  # how much of an existing events file is replayed when the agent starts
MAX_READ = 4 * 1024 * 1024  # per file per poll, so one huge file cannot starve the others


# -- tailing -----------------------------------------------------------------------------------------


@dataclass
class _Tail:
    path: str
    offset: int
    partial: bytes = b""
    inode: int = 0


class EventsTailer:
    """New complete lines of every *.jsonl file in a directory, including files created later."""

    def __init__(self, directory: str, backlog_bytes: int = BACKLOG_BYTES) -> None:
        self.directory = directory
        self.backlog = backlog_bytes
        self.files: dict[str, _Tail] = {}
        self._started = False

    def _discover(self) -> None:
        try:
            names = sorted(n for n in os.listdir(self.directory) if n.endswith(".jsonl"))
        except OSError:
            names = []  # the run dir may not exist yet
        for name in names:
            path = os.path.join(self.directory, name)
            if path in self.files:
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            # Files present at start: replay only their tail. Files that appear later: from the start.
            offset = max(0, st.st_size - self.backlog) if not self._started else 0
            self.files[path] = _Tail(path, offset, b"", st.st_ino)
            if offset > 0:
                self.files[path].partial = b"\0skip"  # drop the first (cut) line
        self._started = True

    def poll(self) -> list[str]:
        self._discover()
        out: list[str] = []
        for tail in self.files.values():
            out.extend(self._read(tail))
        return out

    def _read(self, tail: _Tail) -> list[str]:
        try:
            st = os.stat(tail.path)
        except OSError:
            return []
        if st.st_ino != tail.inode or st.st_size < tail.offset:  # replaced or truncated: start over
            tail.offset, tail.partial, tail.inode = 0, b"", st.st_ino
        if st.st_size == tail.offset:
            return []
        try:
            with open(tail.path, "rb") as f:
                f.seek(tail.offset)
                data = f.read(min(st.st_size - tail.offset, MAX_READ))
        except OSError:
            return []
        tail.offset += len(data)
        chunks = (tail.partial + data).split(b"\n")
        tail.partial = chunks.pop()  # an incomplete last line waits for its newline
        if chunks and chunks[0].startswith(b"\0skip"):
            chunks.pop(0)
        lines = []
        for raw in chunks:
            line = raw.decode("utf-8", "replace").strip()
            if line:
                lines.append(line)
        return lines


# -- measured PS traffic ---------------------------------------------------------------------------

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


# -- CPU, memory, GPUs ------------------------------------------------------------------------------


class CpuMem:
    """CPU % since the previous call, and memory %: psutil when installed, else /proc."""

    def __init__(self) -> None:
        try:
            import psutil  # optional on cluster machines

            self._psutil: Any = psutil
            psutil.cpu_percent(None)
        except ImportError:
            self._psutil = None
        self._last = self._proc_stat()

    @staticmethod
    def _proc_stat() -> tuple[int, int] | None:
        try:
            with open("/proc/stat") as f:
                parts = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
        return sum(parts), idle

    def sample(self) -> tuple[float | None, float | None]:
        if self._psutil is not None:
            return float(self._psutil.cpu_percent(None)), float(self._psutil.virtual_memory().percent)
        cpu = None
        now = self._proc_stat()
        if now and self._last and now[0] > self._last[0]:
            total, idle = now[0] - self._last[0], now[1] - self._last[1]
            cpu = 100.0 * (total - idle) / total
        self._last = now
        mem = None
        try:
            info: dict[str, int] = {}
            with open("/proc/meminfo") as f:
                for line in f:
                    k, v = line.split(":", 1)
                    info[k] = int(v.split()[0])
            mem = 100.0 * (1 - info["MemAvailable"] / info["MemTotal"])
        except (OSError, KeyError, ValueError):
            pass
        return cpu, mem


def parse_nvidia_smi(output: str) -> list[dict[str, Any]]:
    """`nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits`."""
    gpus = []
    for line in output.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            continue
        try:
            gpus.append({"index": int(parts[0]), "util_pct": float(parts[1]), "mem_used_mb": float(parts[2]),
                         "mem_total_mb": float(parts[3])})
        except ValueError:
            continue
    return gpus


def read_gpus() -> list[dict[str, Any]]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        res = subprocess.run(["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used,memory.total",
                              "--format=csv,noheader,nounits"], check=False, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_nvidia_smi(res.stdout) if res.returncode == 0 else []


# -- the agent --------------------------------------------------------------------------------------


def ports_from_run(run_dir: str, host: str) -> tuple[dict[str, int], set[int]]:
    """This host's PS tasks and their ports, and every other task's port, from the plan in run.json."""
    try:
        with open(os.path.join(run_dir, RUN_FILE)) as f:
            plan = json.load(f).get("plan", {})
    except (OSError, ValueError):
        return {}, set()
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


def ps_ports_from_run(run_dir: str, host: str) -> dict[str, int]:
    return ports_from_run(run_dir, host)[0]


class Agent:
    def __init__(self, run_dir: str, host: str, interval: float, out: TextIO,
                 ps_ports: dict[str, int] | None = None, peer_ports: set[int] | None = None) -> None:
        self.run_dir = run_dir
        self.host = host
        self.interval = interval
        self.out = out
        self.tailer = EventsTailer(os.path.join(run_dir, "events"))
        self._explicit_ports = ps_ports
        self.counters = PsCounters(dict(ps_ports or {}), set(peer_ports or ()))
        self.cpu = CpuMem()
        self.gpu_tool = shutil.which("nvidia-smi") is not None
        self.stop = threading.Event()

    def _ports(self) -> dict[str, int]:
        if self._explicit_ports is None and not self.counters.ports:
            # run.json may appear after the agent started
            self.counters.ports, self.counters.peer_ports = ports_from_run(self.run_dir, self.host)
        return self.counters.ports

    def emit(self, lines: Iterable[str]) -> None:
        """Write and flush; a closed stdout (the channel went away) ends the agent."""
        try:
            for line in lines:
                self.out.write(line + "\n")
            self.out.flush()
        except (BrokenPipeError, OSError, ValueError):
            self.stop.set()

    def sample(self) -> str:
        cpu, mem = self.cpu.sample()
        ports = self._ports()
        if ports:
            self.counters.update(read_tcp(ports.values(), self.counters.peer_ports))
        return dumps(make_event(KIND_HOST_SAMPLE, self.host, cpu_pct=cpu, mem_pct=mem,
                                gpus=read_gpus() if self.gpu_tool else [], ps_tcp=self.counters.snapshot()))

    def heartbeat(self) -> str:
        return dumps(make_event(KIND_HEARTBEAT, self.host, interval_s=self.interval))

    def run(self) -> None:
        self.emit([self.heartbeat()])
        # Events are tailed more often than sampled, so a task_state change shows up quickly.
        tail_every = min(self.interval, 0.25)
        next_sample = time.monotonic()
        while not self.stop.is_set():
            lines = self.tailer.poll()
            now = time.monotonic()
            if now >= next_sample:
                lines.append(self.sample())
                lines.append(self.heartbeat())
                next_sample = max(next_sample + self.interval, now)
            if lines:
                self.emit(lines)
            self.stop.wait(max(0.0, min(tail_every, next_sample - time.monotonic())))


def _watch_stdin(stop: threading.Event) -> None:
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except (OSError, ValueError):
        pass
    stop.set()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.agent", description=__doc__.split("\n")[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--host", required=True, help="this host's name from hosts.toml")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--ps-port", action="append", default=None, metavar="NAME=PORT",
                    help="PS task port to measure (default: this host's PS tasks from run.json)")
    ap.add_argument("--peer-port", action="append", type=int, default=None, metavar="PORT",
                    help="another task's port the PS connects to (default: every other task's, from run.json)")
    ap.add_argument("--exit-on-stdin-eof", action="store_true",
                    help="stop when stdin closes (for callers that keep stdin open for the agent's lifetime)")
    args = ap.parse_args(argv)
    if args.interval <= 0:
        ap.error("--interval must be > 0")
    ports = None
    if args.ps_port:
        ports = {}
        for spec in args.ps_port:
            name, _, port = spec.partition("=")
            if not port.isdigit():
                ap.error(f"--ps-port {spec!r}: expected NAME=PORT")
            ports[name] = int(port)
    agent = Agent(args.run_dir, args.host, args.interval, sys.stdout, ports, set(args.peer_port or ()))

    def on_signal(signum: int, frame: object) -> None:
        agent.stop.set()

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)
    if args.exit_on_stdin_eof:
        threading.Thread(target=_watch_stdin, args=(agent.stop,), daemon=True).start()
    agent.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
