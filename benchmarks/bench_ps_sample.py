"""What measuring a PS task's traffic costs its host's supervisor per sample (once a second).

Method: on this machine, a loopback "PS" server with `--conns` live connections (and as many opened by
this process to a "worker" port, as a PS pulls gradients), bytes moving on each between samples. The
supervisor's sample (training/telemetry/traffic.py `TaskTraffic.sample`: two netlink inet_diag dumps,
IPv4 and IPv6, filtered by port in the kernel, parsed, attributed, counted and smoothed) is timed in
this process's CPU time (user + system: the kernel's walk of its established-connections table counts)
over `--samples` samples. For comparison, the command it replaced, one `ss -tinpH` with the same
filter, is timed in its children's CPU time (fork, exec, and its walk of every process's fds).

    python -m benchmarks.bench_ps_sample [--samples 300] [--conns 4]

Writes benchmarks/results/ps_sample.json and ps_sample.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import socket
import subprocess
import time
from typing import Any

from benchmarks.common import publish
from training.telemetry.traffic import PS_KEY, TaskTraffic


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(samples: int, conns: int) -> dict[str, Any]:
    ps, worker = socket.create_server(("127.0.0.1", 0)), socket.create_server(("127.0.0.1", 0))
    ps_port, worker_port = ps.getsockname()[1], worker.getsockname()[1]
    pairs = []
    for server in [ps] * conns + [worker] * conns:
        client = socket.create_connection(server.getsockname()[:2])
        pairs.append((client, server.accept()[0]))
    traffic = TaskTraffic(PS_KEY, {"ps-0": ps_port}, {worker_port})
    me = [os.getpid()]
    try:
        traffic.sample(time.time(), lambda name: me)  # the baseline, and the one fd walk
        spent = 0.0
        for _ in range(samples):
            for a, b in pairs:  # bytes move between samples, as in training
                a.sendall(b"x" * 1000)
                b.recv(65536)
            c0 = time.process_time()
            traffic.sample(time.time(), lambda name: me)
            spent += time.process_time() - c0
        ss_runs, ss_ms = 20, None
        if shutil.which("ss"):
            c0 = _children_cpu()
            for _ in range(ss_runs):
                subprocess.run(["ss", "-tinpH", "state", "established",
                                f"( sport = :{ps_port} or dport = :{worker_port} )"], capture_output=True, check=False)
            ss_ms = round(1000 * (_children_cpu() - c0) / ss_runs, 2)
    finally:
        traffic.close()
        for a, b in pairs:
            a.close()
            b.close()
        ps.close()
        worker.close()
    ms = 1000 * spent / samples
    return {"benchmark": "ps_sample", "samples": samples, "connections": 2 * conns,
            "sample_cpu_ms": round(ms, 3), "cpu_pct_of_one_core_at_1hz": round(ms / 10, 3),
            "ss_tinpH_cpu_ms": ss_ms, "processes_on_machine": sum(1 for p in os.listdir("/proc") if p.isdigit())}


def to_markdown(r: dict[str, Any]) -> str:
    ss = "-" if r["ss_tinpH_cpu_ms"] is None else r["ss_tinpH_cpu_ms"]
    return (
        "# Measuring a PS task's traffic: CPU per sample on its host\n\n"
        f"{r['samples']} samples, {r['connections']} live loopback connections (half to the PS port, half "
        "opened by the PS to a worker port), bytes moving between samples.\n\n"
        "| what | CPU ms per sample | % of one core at 1 sample/s |\n|---|---|---|\n"
        f"| supervisor's sample (netlink inet_diag, IPv4 + IPv6, port-filtered) | {r['sample_cpu_ms']} | "
        f"{r['cpu_pct_of_one_core_at_1hz']} |\n"
        f"| one `ss -tinpH` (what it replaced; {r['processes_on_machine']} processes here: it grows with "
        f"processes and their fds) | {ss} | - |\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--conns", type=int, default=4)
    args = ap.parse_args()
    result = run(args.samples, args.conns)
    publish("ps_sample", result, to_markdown(result), show_json=True)


if __name__ == "__main__":
    main()
