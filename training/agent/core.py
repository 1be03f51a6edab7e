"""The Agent: every interval a `host_sample` and a `heartbeat`, and every new line of the run's events
files, as JSON lines on its output (the collector's SSH channel); it stops when that output is closed.
A task_state line leaves as soon as it is tailed (every 0.25 s); the others with the next sample.
The sample's task facts, GPUs and measured traffic are the supervisor's (its facts file: training/
telemetry/host_facts.py), so the agent measures nothing the supervisor measures already."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterable
from typing import Any, TextIO

from ..run.layout import RunLayout
from ..telemetry.host_facts import read_facts
from ..telemetry.schema import KIND_HEARTBEAT, KIND_HOST_SAMPLE, KIND_TASK_STATE, dumps, make_event
from .host_metrics import CpuMem, read_gpus
from .tailer import EventsTailer

STATE_MARK = f'"kind":"{KIND_TASK_STATE}"'  # as schema.dumps writes it (no spaces)


class Agent:
    def __init__(self, run_dir: str, host: str, interval: float, out: TextIO) -> None:
        self.run_dir = run_dir
        self.host = host
        self.interval = interval
        self.out = out
        self.tailer = EventsTailer(os.path.join(run_dir, "events"))
        self.cpu = CpuMem()
        self.layout = RunLayout(run_dir)
        self.gpu_tool = shutil.which("nvidia-smi") is not None
        self.stop = threading.Event()

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
        facts = read_facts(self.layout, self.host)
        # The supervisor reads the GPUs (and which task holds what) once a second: its facts carry them,
        # so the host is queried once per sample. Only without them does the agent ask nvidia-smi itself.
        gpus = facts.pop("gpus", None)
        if gpus is None:
            gpus = read_gpus() if self.gpu_tool else []
        # (its PS tasks' traffic, `ps_tcp`, or its workers' `allreduce_tcp`, as the supervisor measured it)
        fields: dict[str, Any] = {"cpu_pct": cpu, "mem_pct": mem, "gpus": gpus, "ps_tcp": {}, **facts}
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
