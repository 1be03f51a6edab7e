"""One round of the dashboard at 1024 tasks on 128 hosts, 1 Hz, over real SSH (issue 15: <= 15 % of a core,
frame p95 < 50 ms): bytes through sshd, Paramiko's decryption and the collector's parser, not pre-parsed
events. Used by benchmarks/bench_dash.py, which interleaves rounds with the 256-task replay.

What is real: 8 OpenSSH sshd processes on loopback (testkit/sshd.py); the real `Collector` with one
SSHTransport (its own connection, key exchange and cipher state, Paramiko reader thread) and one
HostStream thread per host, as `tfcluster dash` opens them; the real ClusterState built from the plan of
a real hosts.toml (128 hosts, 8 tasks each: 8 ps hosts with 1 ps + 7 workers, 120 hosts with 8
workers); the real DashboardApp (Textual, headless driver 160x50) polling the collector at its default
1 s. What is simulated: the 128 hosts are 128 loopback addresses served by 8 sshd (16 each), and each
host's agent is a line relay: its `python` is agent_relay.sh (`exec cat <run-dir>/agent.fifo`) and one
process, benchmarks/dash_agents.py, writes every host's agent lines into the FIFOs at the real agent's
formats and rates (see its docstring). Measured, after every stream is up and every worker runs plus a
warm-up: this process's CPU (user + system, every thread) over wall time; the frame time per poll
(DashboardApp.frame_times); the events that arrived and were applied; the queue left at the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from orchestrator.config.load import load_config
from orchestrator.monitor.collect import Collector
from orchestrator.monitor.reducer import ClusterState
from orchestrator.plan.from_file import plan_config
from orchestrator.plan.model import ClusterPlan
from testkit import sshd
from tui.app import DashboardApp

ROOT = Path(__file__).resolve().parents[1]
HOSTS, TASKS_PER_HOST, PS_HOSTS, SSHD = 128, 8, 8, 8  # sshd listens on at most 16 addresses
RELAY = '#!/bin/sh\n# stands in for `python -m training.agent --run-dir R ...`: relays the simulated agent of R\nexec cat "$4/agent.fifo"\n'


class ManyAddressMachines(sshd.Machines):
    """testkit's loopback machines, each sshd also listening on more loopback addresses (one per host name:
    the plan rules refuse two hosts on one address and port)."""

    def __init__(self, n: int, per: int) -> None:
        self.extra = {i: [f"127.77.{i}.{k + 1}" for k in range(per - 1)] for i in range(n)}
        root = Path(tempfile.mkdtemp(prefix="tfcluster-sshd-"))
        super().__init__(n, root, sshd._user_key(), first_address=200, owns_root=True)
        lines = [self.host_key_line(i).replace(f"[{self.addresses[i]}]", f"[{a}]")
                 for i in range(n) for a in [self.addresses[i], *self.extra[i]]]
        Path(self.known_hosts).write_text("".join(line + "\n" for line in lines))
        sshd._LIVE.append(self)
        self.start_all()

    def _write_sshd_config(self, i: int) -> None:
        super()._write_sshd_config(i)
        with open(self._sshd_config(i), "a") as f:
            f.writelines(f"ListenAddress {a}\n" for a in self.extra[i])

    def host_address(self, h: int) -> str:
        i, k = h % len(self.addresses), h // len(self.addresses)
        return self.addresses[i] if k == 0 else self.extra[i][k - 1]


def hosts_toml(machines: ManyAddressMachines, path: Path) -> Path:
    lines = ["[cluster]", 'name = "dash-scale"', 'mode = "between-graph"', "base_port = 30000", "", "[ssh]",
             f'user = "{machines.user}"', f"port = {machines.port}", f'identity_file = "{machines.identity_file}"',
             f'known_hosts = "{machines.known_hosts}"', 'strict_host_key_checking = "yes"', "connect_timeout = 20.0",
             'config_file = "none"', "use_agent = false", "", "[remote]", f'python = "{path.parent / "agent_relay.sh"}"', ""]
    for h in range(HOSTS):
        roles, workers = (['"ps"', '"worker"'], TASKS_PER_HOST - 1) if h < PS_HOSTS else (['"worker"'], TASKS_PER_HOST)
        lines += ["[[hosts]]", f'name = "h{h:03d}"', f'address = "{machines.host_address(h)}"',
                  f"roles = [{', '.join(roles)}]", f"workers = {workers}", f'workdir = "{path.parent / "work"}"', ""]
    path.write_text("\n".join(lines) + "\n")
    return path


def prepare(machines: ManyAddressMachines, root: Path, seconds: float) -> tuple[ClusterPlan, dict[str, str], Path]:
    """The plan, each host's run dir (its code dir and its agent FIFO) and the agents' spec file."""
    (root / "agent_relay.sh").write_text(RELAY)
    (root / "agent_relay.sh").chmod(0o755)
    plan = plan_config(load_config(hosts_toml(machines, root / "hosts.toml")))
    run_dirs: dict[str, str] = {}
    spec: dict[str, Any] = {"hosts": {}, "ps": sorted(t.name for t in plan.tasks if t.job == "ps"), "seconds": seconds}
    for n, h in enumerate(plan.hosts):
        d = root / "runs" / h.name
        (d / "code").mkdir(parents=True)
        (d / "lib").mkdir()  # the agent runs there (the collector's cwd: orchestrator/monitor/collect.py)
        os.mkfifo(d / "agent.fifo")
        run_dirs[h.name] = str(d)
        spec["hosts"][h.name] = {"run_dir": str(d), "ip": f"10.1.{n // 250}.{n % 250 + 1}",
                                 "tasks": [[t.job, t.index, t.port] for t in plan.tasks if t.host == h.name]}
    (root / "spec.json").write_text(json.dumps(spec))
    return plan, run_dirs, root / "spec.json"


class CountingCollector(Collector):
    """The collector, counting what each poll applied and what it left queued (nothing is changed)."""

    applied = 0
    left_after_poll = 0

    def poll(self) -> ClusterState:
        before = self._queue.qsize()
        st = super().poll()
        self.left_after_poll = self._queue.qsize()
        self.applied += max(before - self.left_after_poll, 0)
        return st


def cpu_s(p: psutil.Process) -> float:
    """The process's own CPU seconds, user + system (its children not counted)."""
    t = p.cpu_times()
    return t.user + t.system


def frame_stats(frames: list[float]) -> dict[str, float | None]:
    """Frame count and median, p95 and max in ms, from frame times in seconds."""
    ms = sorted(f * 1000 for f in frames)
    return {"frames": len(ms), "frame_ms_median": round(statistics.median(ms), 2) if ms else None,
            "frame_ms_p95": round(ms[int(0.95 * (len(ms) - 1))], 2) if ms else None,
            "frame_ms_max": round(ms[-1], 2) if ms else None}


async def _measure(collector: CountingCollector, seconds: float, warmup: float, ready_timeout: float,
                   profile: str | None) -> dict[str, Any]:
    app = DashboardApp(collector, None, readonly=True, interval=1.0)
    proc = psutil.Process()
    async with app.run_test(size=(160, 50)) as pilot:
        t0 = time.monotonic()
        while time.monotonic() - t0 < ready_timeout:
            st = collector.state
            if (all(s.connected for s in collector.streams)
                    and sum(1 for t in st.tasks.values() if t.state == "running") >= len(st.tasks) - 4):
                break
            await asyncio.sleep(0.5)
        else:
            raise RuntimeError(f"not every stream up and task running in {ready_timeout}s: "
                               f"{sum(s.connected for s in collector.streams)} streams, {collector.state.counts}")
        ready_s = time.monotonic() - t0
        await asyncio.sleep(warmup)
        frames0, applied0 = len(app.frame_times), collector.applied
        heard0 = sum(s.heartbeats for s in collector.streams)
        prof = None
        if profile:
            import yappi  # the developer's own venv only: not a project dependency

            yappi.set_clock_type("cpu")
            yappi.start(profile_threads=not profile.endswith(".main"))  # FILE.main: the UI thread only
            prof = yappi
        c0, w0, th0 = cpu_s(proc), time.monotonic(), _thread_cpu()
        await asyncio.sleep(seconds)
        c1, w1, th1 = cpu_s(proc), time.monotonic(), _thread_cpu()
        if prof is not None and profile:
            prof.stop()
            prof.get_func_stats().save(profile, type="pstat")
        frames = list(app.frame_times)[frames0:]
        applied = collector.applied - applied0
        heartbeats = sum(s.heartbeats for s in collector.streams) - heard0
        st = collector.state
        rows = app.tasks_table.row_count
        counts = dict(st.counts)
        stale = max(st.now - (h.t_heard or 0.0) for h in st.hosts.values())
        await pilot.press("q")
    return {
        "tasks": len(st.tasks), "rows": rows, "hosts": len(st.hosts), "ssh_connections": len(collector.streams),
        "seconds": round(w1 - w0, 2), "ready_s": round(ready_s, 1),
        "cpu_pct_of_one_core": round(100.0 * (c1 - c0) / (w1 - w0), 2),
        "events_per_s": round(applied / (w1 - w0), 1), "heartbeats_per_s": round(heartbeats / (w1 - w0), 1),
        **frame_stats(frames), "events_queued_after_last_poll": collector.left_after_poll, "host_silence_max_s": round(stale, 2),
        "malformed_lines": st.malformed, "task_counts": counts,
        "cpu_pct_by_thread": {k: round(100.0 * (th1.get(k, 0.0) - th0.get(k, 0.0)) / (w1 - w0), 2)
                              for k in sorted(set(th0) | set(th1))},
    }


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of this process's threads by kind: the UI (main), collector streams, Paramiko readers."""
    import threading

    import paramiko

    from orchestrator.monitor.collect import HostStream
    from orchestrator.monitor.pump import StreamPump

    threads = {t.native_id: t for t in threading.enumerate()}
    out: dict[str, float] = {}
    for t in psutil.Process().threads():
        th = threads.get(t.id)
        kind = ("ui (poll, reducer, Textual)" if th is threading.main_thread() else "collector streams (read, parse)"
                if isinstance(th, HostStream | StreamPump) else "paramiko transports (decrypt)"
                if isinstance(th, paramiko.Transport) else f"other: {th.name if th else 'gone'}")
        out[kind] = out.get(kind, 0.0) + t.user_time + t.system_time
        out[kind + ", system"] = out.get(kind + ", system", 0.0) + t.system_time  # syscalls, wake-ups
    return out


def run_round(machines: ManyAddressMachines, seconds: float = 30.0, warmup: float = 5.0, ready_timeout: float = 180.0,
              profile: str | None = None) -> dict[str, Any]:
    """One measured round on running machines; the agents process and the collector end with it."""
    with tempfile.TemporaryDirectory(prefix="dash-scale-") as tmp:
        root = Path(tmp)
        plan, run_dirs, spec = prepare(machines, root, seconds + warmup + ready_timeout + 60)
        agents = subprocess.Popen([sys.executable, "-m", "benchmarks.dash_agents", str(spec)], cwd=ROOT)
        state = ClusterState.from_plan(plan, "dash-scale", 1.0)
        collector = CountingCollector(state, list(plan.hosts), run_dirs, {h.name: h.python for h in plan.hosts}, 1.0)
        remote0 = _remote_cpu(machines, agents)
        try:
            collector.start()
            result = asyncio.run(_measure(collector, seconds, warmup, ready_timeout, profile))
        finally:
            remote1 = _remote_cpu(machines, agents)
            collector.close()
            agents.terminate()
            agents.wait(timeout=10)
    result["remote_side_cpu_s"] = round(remote1 - remote0, 1)  # sshd sessions + agents, whole round (context)
    return result


def _remote_cpu(machines: ManyAddressMachines, agents: subprocess.Popen[bytes]) -> float:
    total = 0.0
    pids = [agents.pid, *machines.sshd_pids()]
    for pid in pids:
        try:
            p = psutil.Process(pid)
            for q in [p, *p.children(recursive=True)]:
                total += cpu_s(q)
        except psutil.Error:
            continue
    return total


if __name__ == "__main__":  # one round, printed (profiling: --profile FILE writes a yappi pstat)
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--profile", default=None)
    args = ap.parse_args()
    m = ManyAddressMachines(SSHD, HOSTS // SSHD)
    try:
        print(json.dumps(run_round(m, args.seconds, profile=args.profile), indent=2))
    finally:
        sshd.stop_all()
