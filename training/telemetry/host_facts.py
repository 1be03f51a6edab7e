"""What this host can say about a run's tasks that no task says about itself, written in one place and read
by everyone: whether each task's processes live, the CPU they use and when it last moved, whether one is
stopped (SIGSTOP), and since when its TF server listens on its port.

The supervisor keeps `state/host-<host>.facts` up to date (`FactsWriter`, about once a second: /proc,
and the GPUs read on a thread of their own). The agent sends its content with every `host_sample`, with
whether the supervisor itself still lives (`read_facts`); `status` reads the same file in sh
(orchestrator/run/read_host.py): the dashboard and `status` judge liveness from the very same facts
(orchestrator/monitor/views.py). Where the host has GPUs (NVML or nvidia-smi: gpu_use.py) the file also
holds them (`gpus`: utilisation, memory, temperature, power) and each task's `gpu_mem`, the MiB its own
processes hold on each GPU index ({}: none; absent: the GPUs were not read). On a host that runs a PS
task (or a multi-worker-mirrored worker) it also holds that task's measured traffic, counters and
current rates (`ps_tcp` or `allreduce_tcp`: traffic.py), so one read of the file has them. A facts
file that stopped changing because its supervisor died is no news: the supervisor's death is, and the
run's processes are then counted again from /proc (and its GPU and traffic figures dropped: nobody
measures them for it any more).
Stdlib only.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING

from ..run.layout import RUN_DIR_ENV, RunLayout
from .gpu_use import GpuSampler, attribute, pids_visible
from .task_cpu import TaskCpu
from .traffic import TRAFFIC_KEYS, TaskTraffic

if TYPE_CHECKING:
    from typing import Any

LISTEN = "0A"  # /proc/net/tcp's state column for a listening socket
CPU_MOVED_S = 0.01  # one clock tick: any CPU used at all since the previous sample
GPU_STALE_S = 10.0  # a GPU reading older than this is no longer written (its sampler reads every second)


def listening_ports(proc: str = "/proc") -> set[int]:
    """Every TCP port something listens on, IPv4 and IPv6 (TensorFlow listens on [::])."""
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"{proc}/net/{table}", encoding="ascii", errors="replace") as f:
                next(f, None)  # header
                for line in f:
                    fields = line.split()
                    if len(fields) > 3 and fields[3] == LISTEN:
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except (OSError, ValueError, IndexError):
            continue
    return ports


class FactsWriter:
    """The supervisor's: `update(now)` samples its host's tasks and rewrites the facts file."""

    def __init__(self, layout: RunLayout, host: str, ports: dict[str, int | None], proc: str = "/proc",
                 gpus: GpuSampler | None = None, find_gpus: bool = True,
                 traffic: TaskTraffic | None = None) -> None:
        self.layout = layout
        self.host = host
        self.ports = ports  # this host's task names -> their TF port (None: no server)
        self.proc = proc
        self.cpu = TaskCpu(layout.root, proc)
        self.facts: dict[str, dict[str, Any]] = {}
        self.gpus = gpus if gpus is not None or not find_gpus else GpuSampler.if_present()
        self.traffic = traffic  # None: no task of this host is measured

    def update(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        cpu = self.cpu.sample()
        listening = listening_ports(self.proc)
        # A reading older than a few of its intervals is not shown as current (a hung nvidia-smi)
        gpus = self.gpus.latest(max_age_s=GPU_STALE_S) if self.gpus is not None else None
        held = attribute(gpus, self.cpu.task_of) if gpus is not None else {}
        matched = gpus is not None and pids_visible(gpus, self.proc)  # else each task's memory is unknown
        for name, port in self.ports.items():
            seen = cpu.get(name, {})
            old = self.facts.get(name, {})
            cpu_s = float(seen.get("cpu_s", old.get("cpu_s", 0.0)))
            moved = cpu_s > float(old.get("cpu_s", 0.0)) + CPU_MOVED_S / 2 or ("cpu_s" not in old and cpu_s > 0)
            listens = port is not None and port in listening
            self.facts[name] = {
                "procs": int(seen.get("procs", 0)), "cpu_s": cpu_s, "stopped": bool(seen.get("stopped", False)),
                "cpu_moved_at": now if moved else old.get("cpu_moved_at"),
                "listening_since": (old.get("listening_since") or now) if listens else None,
            }
            if matched:
                self.facts[name]["gpu_mem"] = held.get(name, {})
        doc: dict[str, Any] = {"host": self.host, "t": now, "tasks": self.facts}
        if gpus is not None:
            doc["gpus"] = gpus.gpus
        if self.traffic is not None:
            doc[self.traffic.key] = self.traffic.sample(now, self.cpu.pids_of)
        tmp = f"{self.layout.facts_file(self.host)}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps(doc, separators=(",", ":")))
        os.replace(tmp, self.layout.facts_file(self.host))


def _pid_of_run(pid: int, run_dir: str, proc: str) -> bool:
    try:
        with open(f"{proc}/{pid}/environ", "rb") as f:
            return f"{RUN_DIR_ENV}={run_dir}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def read_facts(layout: RunLayout, host: str, proc: str = "/proc") -> dict[str, Any]:
    """{"tasks": {name: {...}}, "supervisor": {"pid", "alive", "state", "outcome"}}: the supervisor's last
    facts, whether it still lives (alive None: it has not written its state yet), and its state file's
    word and the run's outcome as it decided it."""
    out: dict[str, Any] = {"tasks": {}, "supervisor": {"pid": None, "alive": None}}
    try:
        with open(layout.facts_file(host), encoding="utf-8") as f:
            doc = json.load(f)
        out["tasks"] = doc.get("tasks", {})
        if isinstance(doc.get("t"), int | float):
            out["facts_t"] = doc["t"]  # when the supervisor read them: a rate over facts is timed by it
        if "gpus" in doc:
            out["gpus"] = doc["gpus"]
        for key in TRAFFIC_KEYS:
            if key in doc:
                out[key] = doc[key]
    except (OSError, ValueError):
        pass
    try:
        with open(layout.supervisor_state_file(host), encoding="utf-8") as f:
            sup = json.load(f)
    except (OSError, ValueError):
        return out
    pid = sup.get("pid")
    alive = isinstance(pid, int) and _pid_of_run(pid, layout.root, proc)
    out["supervisor"] = {"pid": pid, "alive": alive, "state": sup.get("state"), "outcome": sup.get("outcome")}
    if not alive:
        # No supervisor reads the GPUs any more: what the file says of them is old
        out.pop("gpus", None)
        for key in TRAFFIC_KEYS:
            out.pop(key, None)  # nor measures the traffic: its last rates are not current
        for facts in out["tasks"].values():
            if isinstance(facts, dict):
                facts.pop("gpu_mem", None)
    if not alive and out["tasks"]:
        # Its last facts are stale: count each task's processes now (what still runs is never "lost").
        from ..supervisor.procfs import run_processes

        live = [p["task"].split("#", 1)[0] for p in run_processes(layout.root) if p["task"]]
        for name, facts in out["tasks"].items():
            facts["procs"] = live.count(name)
    return out
