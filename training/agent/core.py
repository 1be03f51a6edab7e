"""The Agent: every interval a `host_sample` and a `heartbeat`, and every new line of the run's events
files, as JSON lines on its output (the collector's SSH channel); it stops when that output is closed.
A task_state line leaves as soon as it is tailed (every 0.25 s); the others with the next sample."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterable
from typing import Any, TextIO

from ..run.layout import RUN_FILE, RunLayout
from ..telemetry.host_facts import read_facts
from ..telemetry.schema import KIND_HEARTBEAT, KIND_HOST_SAMPLE, KIND_TASK_STATE, dumps, make_event
from .host_metrics import CpuMem, read_gpus
from .tailer import EventsTailer
from .tcp import PsCounters, read_tcp

STATE_MARK = f'"kind":"{KIND_TASK_STATE}"'  # as schema.dumps writes it (no spaces)


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


def allreduce_ports_from_run(run_dir: str, host: str) -> tuple[dict[str, int], set[int]]:
    """multi-worker-mirrored has no PS: its traffic is the all-reduce between the workers, measured per
    worker task of this host (the connections its server accepts and those it opens to the other
    workers' ports, as for a PS). Other modes: nothing."""
    try:
        with open(os.path.join(run_dir, RUN_FILE)) as f:
            plan = json.load(f).get("plan", {})
    except (OSError, ValueError):
        return {}, set()
    if plan.get("mode") != "multi-worker-mirrored":
        return {}, set()
    mine: dict[str, int] = {}
    others: set[int] = set()
    for t in plan.get("tasks", []):
        if t.get("port") is None:
            continue
        if t.get("host") == host and t.get("job") in ("worker", "chief"):
            mine[f"{t.get('job')}-{t.get('index')}"] = int(t["port"])
        else:
            others.add(int(t["port"]))
    return mine, others


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
        self.allreduce = PsCounters({})  # multi-worker-mirrored's workers (allreduce_ports_from_run)
        self.cpu = CpuMem()
        self.layout = RunLayout(run_dir)
        self.gpu_tool = shutil.which("nvidia-smi") is not None
        self.stop = threading.Event()

    def _ports(self) -> dict[str, int]:
        if self._explicit_ports is None and not self.counters.ports and not self.allreduce.ports:
            # run.json may appear after the agent started
            self.counters.ports, self.counters.peer_ports = ports_from_run(self.run_dir, self.host)
            self.allreduce.ports, self.allreduce.peer_ports = allreduce_ports_from_run(self.run_dir, self.host)
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
        if self.allreduce.ports:
            self.allreduce.update(read_tcp(self.allreduce.ports.values(), self.allreduce.peer_ports))
        facts = read_facts(self.layout, self.host)
        # The supervisor reads the GPUs (and which task holds what) once a second: its facts carry them,
        # so the host is queried once per sample. Only without them does the agent ask nvidia-smi itself.
        gpus = facts.pop("gpus", None)
        if gpus is None:
            gpus = read_gpus() if self.gpu_tool else []
        fields: dict[str, Any] = {"cpu_pct": cpu, "mem_pct": mem, "gpus": gpus,
                                  "ps_tcp": self.counters.snapshot(), **facts}
        if self.allreduce.ports:
            fields["allreduce_tcp"] = self.allreduce.snapshot()
        return dumps(make_event(KIND_HOST_SAMPLE, self.host, **fields))

    def heartbeat(self) -> str:
        return dumps(make_event(KIND_HEARTBEAT, self.host, interval_s=self.interval))

    def run(self) -> None:
        self.emit([self.heartbeat()])
        # Events are tailed more often than sampled, so a task_state change leaves at once. Other lines
        # (progress: one per task per second, each at its own moment) wait for the sample: one write, so
        # one SSH packet, per host per interval instead of one per tail. Packets are what the collector
        # pays for most at a hundred hosts, and it applies lines once per interval anyway.
        tail_every = min(self.interval, 0.25)
        next_sample = time.monotonic()
        held: list[str] = []
        while not self.stop.is_set():
            new = self.tailer.poll()
            held += new
            now = time.monotonic()
            flush = any(STATE_MARK in line for line in new)
            if now >= next_sample:
                held.append(self.sample())
                held.append(self.heartbeat())
                next_sample = max(next_sample + self.interval, now)
                flush = True
            if flush and held:
                self.emit(held)
                held = []
            self.stop.wait(max(0.0, min(tail_every, next_sample - time.monotonic())))
