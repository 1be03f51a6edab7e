"""The remote side of the 1024-task dashboard benchmark: simulated telemetry agents for many hosts in one
process, each host's output written to its own FIFO, which the host's SSH session reads with `cat`
(the benchmark gives every host a `python` that is `agent_relay.sh`: `exec cat <run-dir>/agent.fifo`).

    python -m benchmarks.dash_agents SPEC.json

SPEC: {"hosts": {name: {"run_dir": str, "ip": str, "tasks": [[job, index, port], ...]}}, "ps": [names],
"seconds": float}. What is simulated, and how it matches the real agent (training/agent/core.py): the
lines are the agent's formats (training/telemetry/schema.py dumps/make_event): a `task_state` "running"
per task when its stream opens (the events-file backlog the agent replays), then per second per host
one `host_sample` (cpu/mem, the supervisor's facts for every task, and on a PS host its `ps_tcp`
counters with one peer per other host) and one `heartbeat`, and one `progress` per worker (with
`ps_bytes` for every PS, as between-graph workers report), each host and task at its own phase. They
leave as the agent sends them: it tails every 0.25 s, sends a task_state at once and the other lines
with the sample, once per interval (one write each, so one SSH packet). Every 10 s one worker dies (SIGKILL), is
restarted 1 s later and runs again 2 s after that, so the event log and the state changes are
exercised. Nothing here runs TensorFlow or reads /proc: its CPU is the remote hosts', not measured.
Stops after `seconds`, or on SIGTERM.
"""

from __future__ import annotations

import errno
import heapq
import json
import os
import random
import signal
import sys
import time
from typing import Any

from training.telemetry.schema import dumps, make_event

TAIL_S = 0.25  # the agent's tail period (training/agent/core.py)
INCIDENT_EVERY_S = 10.0


class Host:
    def __init__(self, name: str, spec: dict[str, Any], ps: list[str], peers: list[str], rng: random.Random) -> None:
        self.name = name
        self.fifo = os.path.join(spec["run_dir"], "agent.fifo")
        self.tasks = [(str(j), int(i), int(p)) for j, i, p in spec["tasks"]]
        self.ps_here = [(f"{j}-{i}", p) for j, i, p in self.tasks if j == "ps"]
        self.ps_all = ps
        self.peers = peers
        self.phase = {f"{j}-{i}": rng.random() for j, i, _ in self.tasks}
        self.sample_phase = rng.random()
        self.step = {f"{j}-{i}": 0 for j, i, _ in self.tasks}
        self.down_until: dict[str, float] = {}
        self.cpu_s = dict.fromkeys(self.step, 0.0)
        self.tcp = {name: [0, 0] for name, _ in self.ps_here}
        self.fd: int | None = None
        self.out = bytearray()
        self.last = time.time()
        self.held: list[str] = []  # lines the agent holds until its next flush
        self.sampled = False  # the last `lines` call included the sample

    def backlog(self, now: float) -> list[str]:
        return [dumps(make_event("heartbeat", self.name, t=now, interval_s=1.0))] + [
            dumps(make_event("task_state", self.name, job=j, task=i, t=now, state="running", pid=10_000 + i,
                             restarts=0, exit_code=None, signal=None, final=False, stopped_by=None, held=False,
                             restarts_left=3, restart_reason=None, error=None))
            for j, i, _ in self.tasks]

    def lines(self, since: float, now: float) -> list[str]:
        """What the agent writes in (since, now]: progress whose phase fell in it, then the sample."""
        out: list[str] = []
        for j, i, _ in self.tasks:
            name = f"{j}-{i}"
            if j == "ps" or not _crossed(self.phase[name], since, now) or now < self.down_until.get(name, 0.0):
                continue
            steps = 3 + i % 5
            self.step[name] += steps
            self.cpu_s[name] += 0.9
            loss = round(2.0 / (1.0 + 0.01 * self.step[name]) + 0.001 * i, 6)
            out.append(dumps(make_event(
                "progress", self.name, job=j, task=i, t=now, local_step=self.step[name],
                global_step=self.step[name] * 1016, examples=self.step[name] * 128, loss=loss, interval_s=1.0,
                steps=steps, ps_bytes={p: {"pulled": 40_000 * steps, "pushed": 40_000 * steps} for p in self.ps_all})))
        self.sampled = _crossed(self.sample_phase, since, now)
        if self.sampled:
            out.append(self.sample(now))
            out.append(dumps(make_event("heartbeat", self.name, t=now, interval_s=1.0)))
        return out

    def sample(self, now: float) -> str:
        for counters in self.tcp.values():
            counters[0] += 40_000_000
            counters[1] += 41_000_000
        n = len(self.peers)
        ps_tcp = {name: {"port": port, "t": now, "bytes_in": self.tcp[name][0], "bytes_out": self.tcp[name][1],
                         "in_Bps": 40_000_000.0, "out_Bps": 41_000_000.0,
                         "peers": {ip: {"bytes_in": self.tcp[name][0] // n, "bytes_out": self.tcp[name][1] // n,
                                        "in_Bps": 40_000_000.0 / n, "out_Bps": 41_000_000.0 / n} for ip in self.peers}}
                  for name, port in self.ps_here}
        facts = {f"{j}-{i}": {"procs": 0 if now < self.down_until.get(f"{j}-{i}", 0.0) else 1,
                              "cpu_s": round(self.cpu_s[f"{j}-{i}"], 2), "stopped": False, "cpu_moved_at": now,
                              "listening_since": now - 60.0} for j, i, _ in self.tasks}
        return dumps(make_event("host_sample", self.name, t=now, cpu_pct=88.5, mem_pct=41.2, gpus=[], ps_tcp=ps_tcp,
                                tasks=facts, supervisor={"pid": 4242, "alive": True}))

    def incident(self, index: int, now: float) -> list[str]:
        """Worker `index` of this host: SIGKILLed now, restarting, running again (its steps from zero)."""
        j, i, _ = self.tasks[index]
        name = f"{j}-{i}"
        self.down_until[name] = now + 3.0
        self.step[name] = 0
        common = {"job": j, "task": i, "final": False, "stopped_by": None, "held": False, "error": None}
        return [dumps(make_event("task_state", self.name, t=now, state="exited", pid=10_000 + i, exit_code=None,
                                 signal=9, restarts=0, restarts_left=3, restart_reason=None, **common)),
                dumps(make_event("task_state", self.name, t=now + 1.0, state="restarting", pid=None, exit_code=None,
                                 signal=9, restarts=1, restarts_left=2, restart_reason="failure", **common)),
                dumps(make_event("task_state", self.name, t=now + 3.0, state="running", pid=20_000 + i, exit_code=None,
                                 signal=None, restarts=1, restarts_left=2, restart_reason=None, **common))]

    def send(self, lines: list[str]) -> None:
        """Append to the host's output; open the FIFO once its reader (`cat`) is there; a reader that went
        away (the stream was closed) drops what was pending, as a dead channel would."""
        if self.fd is None:
            try:
                self.fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno in (errno.ENXIO, errno.ENOENT):
                    return  # no reader yet: the agent has not been started
                raise
            self.out = bytearray("".join(x + "\n" for x in self.backlog(time.time())).encode())
        self.out += "".join(x + "\n" for x in lines).encode()
        try:
            while self.out:
                n = os.write(self.fd, self.out)
                del self.out[:n]
        except BlockingIOError:
            pass  # the pipe is full: the rest waits for the next batch, as the agent's blocking write would
        except BrokenPipeError:
            os.close(self.fd)
            self.fd, self.out = None, bytearray()


def _crossed(phase: float, since: float, now: float) -> bool:
    """Whether a once-a-second event at fractional second `phase` fell in (since, now]."""
    k = int(now - phase)
    return since < k + phase <= now


def main(argv: list[str] | None = None) -> int:
    with open((argv or sys.argv[1:])[0], encoding="utf-8") as f:
        spec = json.load(f)
    rng = random.Random(7)
    ips = [h["ip"] for h in spec["hosts"].values()]
    hosts = [Host(name, h, spec["ps"], [ip for ip in ips if ip != h["ip"]], rng) for name, h in spec["hosts"].items()]
    stop_at = time.time() + float(spec["seconds"])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    start = time.time()
    due = [(start + rng.random() * TAIL_S, n) for n in range(len(hosts))]  # each agent's own tail phase
    heapq.heapify(due)
    next_incident, victim = start + INCIDENT_EVERY_S, 0
    pending: list[tuple[float, int, list[str]]] = []  # incident lines due later
    while time.time() < stop_at:
        at, n = heapq.heappop(due)
        wait = at - time.time()
        if wait > 0:
            time.sleep(wait)
        now = time.time()
        host = hosts[n]
        host.held += host.lines(host.last, now)
        host.last = now
        flush = host.sampled
        if now >= next_incident and host.fd is not None and len(host.tasks) > 1:
            later = host.incident(1 + victim % (len(host.tasks) - 1), now)
            host.held.append(later[0])
            pending += [(now + 1.0, n, [later[1]]), (now + 3.0, n, [later[2]])]
            next_incident, victim = now + INCIDENT_EVERY_S, victim + 1
            flush = True
        for item in [p for p in pending if p[1] == n and p[0] <= now]:
            pending.remove(item)
            host.held += item[2]
            flush = True
        if flush:
            host.send(host.held)
            host.held = []
        heapq.heappush(due, (at + TAIL_S, n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
