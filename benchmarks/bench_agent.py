"""CPU use of the telemetry agent on a busy host (issue 5 target: < 2 % of one core).

Method: a real `python -m training.agent --interval 1` process on a run dir whose events directory has
N task files, each appended one progress line a second (as TF tasks do). (The PS traffic the agent
sends is the supervisor's measurement, read from its facts file: training/telemetry/traffic.py; the
agent measures nothing itself.) The agent's CPU time (user + system, from /proc via psutil, children
included) is divided by wall time. Its stdout is read and counted, so the figure includes writing every
line.

    python -m benchmarks.bench_agent [--seconds 20] [--tasks 8]

Writes benchmarks/results/agent.json and agent.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks.common import ROOT, machine_line, publish


def _cpu(proc: psutil.Process) -> float:
    total = 0.0
    t = proc.cpu_times()
    total += t.user + t.system + t.children_user + t.children_system
    return total


def run(seconds: float, tasks: int) -> dict[str, Any]:
    stop = threading.Event()
    with tempfile.TemporaryDirectory() as d:
        run_dir = Path(d)
        ev = run_dir / "events"
        ev.mkdir()
        def writers() -> None:
            step = 0
            while not stop.is_set():
                step += 1
                for i in range(tasks):
                    with open(ev / f"worker-{i}.jsonl", "a") as f:
                        f.write(json.dumps({"v": 1, "t": time.time(), "host": "h", "kind": "progress",
                                            "job": "worker", "task": i, "local_step": step, "global_step": step,
                                            "examples": step * 128, "loss": 1.0, "interval_s": 1.0,
                                            "ps_bytes": {"ps-0": {"pulled": 1000, "pushed": 1000}}}) + "\n")
                stop.wait(1.0)

        threads = [threading.Thread(target=writers, daemon=True)]
        for t in threads:
            t.start()
        proc = subprocess.Popen([sys.executable, "-m", "training.agent", "--run-dir", str(run_dir), "--host", "h",
                                 "--interval", "1"],
                                cwd=ROOT, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        lines = [0]

        def reader() -> None:
            assert proc.stdout is not None
            for _ in proc.stdout:
                lines[0] += 1

        rt = threading.Thread(target=reader, daemon=True)
        rt.start()
        try:
            ps = psutil.Process(proc.pid)
            time.sleep(2.0)  # start-up (interpreter, imports) is not the steady state
            c0, w0 = _cpu(ps), time.monotonic()
            time.sleep(seconds)
            c1, w1 = _cpu(ps), time.monotonic()
        finally:
            stop.set()
            proc.terminate()
            proc.wait(timeout=10)
    cpu_pct = 100.0 * (c1 - c0) / (w1 - w0)
    return {"benchmark": "agent", "seconds": round(w1 - w0, 2), "tasks": tasks, "interval_s": 1.0,
            "cpu_pct_of_one_core": round(cpu_pct, 3), "lines_out": lines[0], "target_pct": 2.0,
            "meets_target": cpu_pct < 2.0, "machine_cpus": psutil.cpu_count(),
            "load_avg_1m_at_end": round(os.getloadavg()[0], 2)}


def to_markdown(result: dict[str, Any]) -> str:
    return (
        "# Telemetry agent CPU use\n\n"
        f"{result['tasks']} task event files at 1 line/s each, interval 1 s, "
        f"{result['seconds']} s measured.\n\n"
        f"| CPU (% of one core) | target | lines streamed |\n|---|---|---|\n"
        f"| {result['cpu_pct_of_one_core']} | < {result['target_pct']} | {result['lines_out']} |\n"
        + machine_line(result["machine_cpus"], result["load_avg_1m_at_end"]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--tasks", type=int, default=8)
    args = ap.parse_args()
    result = run(args.seconds, args.tasks)
    publish("agent", result, to_markdown(result), show_json=True)


if __name__ == "__main__":
    main()
