"""CPU cost of reading progress from task logs in the supervisor (training/progress/tailer.py).

Method: a real writer process appends to 8 task logs at 100 segments/s each, replaying the output TF 2.21
and Keras 3.15 really printed (tests/unit/data/progress: TF1 hooks under TF's logger and absl, Keras fit
verbose=1 `\\r` updates and verbose=2 lines, warnings included), two tasks per file, looping. In this
process, 8 LogProgressTailers are polled every 0.1 s as the supervisor would (`poll_tailers`), writing
progress events at most once a second per task. The CPU time of each poll (time.process_time: this
process only; the writer is another process) gives ms per poll and % of one core. An idle phase (no new
output) gives the floor: 8 stat calls per poll.

    python -m benchmarks.bench_log_progress [--seconds 20] [--tasks 8] [--rate 100]

Writes benchmarks/results/log_progress.json and log_progress.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, machine, machine_line, publish
from training.progress.tailer import close_tailers, log_progress_tailers, poll_tailers
from training.run.layout import RunLayout

FIXTURES = ["tf1_hooks_tflogger.log", "tf1_hooks_absl.log", "keras_fit_verbose1.log", "keras_fit_verbose2.log"]
POLL = 0.1

WRITER = r"""
import re, sys, time
logs, fixtures, rate, seconds = sys.argv[1].split(","), sys.argv[2].split(","), float(sys.argv[3]), float(sys.argv[4])
chunks = []  # per log: the fixture's segments with their terminators, as printed
for i, log in enumerate(logs):
    data = open(fixtures[i % len(fixtures)], "rb").read()
    chunks.append([m.group() for m in re.finditer(rb"[^\r\n\b]*[\r\n\b]+", data)])
files = [open(log, "ab", buffering=0) for log in logs]
tick = 1.0 / rate
start = time.monotonic()
n = 0
while time.monotonic() - start < seconds:
    for f, cs in zip(files, chunks):
        f.write(cs[n % len(cs)])
    n += 1
    time.sleep(max(0.0, start + n * tick - time.monotonic()))
print(n)
"""


def _poll_for(tailers: list[Any], seconds: float) -> list[float]:
    costs: list[float] = []
    deadline = time.monotonic() + seconds
    next_poll = time.monotonic()
    while time.monotonic() < deadline:
        cpu = time.process_time()
        poll_tailers(tailers)
        costs.append(time.process_time() - cpu)
        next_poll += POLL
        time.sleep(max(0.0, next_poll - time.monotonic()))
    return costs


def run(seconds: float, tasks: int, rate: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        layout = RunLayout(d)
        for directory in layout.dirs():
            Path(directory).mkdir(parents=True, exist_ok=True)
        plan = {"uses_user_command": True, "training": {},
                "tasks": [{"job": "worker", "index": i, "host": "h"} for i in range(tasks)]}
        tailers = log_progress_tailers(layout, "h", plan)
        idle = _poll_for(tailers, 3.0)
        logs = ",".join(layout.log_file("worker", i) for i in range(tasks))
        fixtures = ",".join(str(ROOT / "tests" / "unit" / "data" / "progress" / f) for f in FIXTURES)
        writer = subprocess.Popen([sys.executable, "-c", WRITER, logs, fixtures, str(rate), str(seconds)],
                                  stdout=subprocess.PIPE, text=True)
        try:
            busy = _poll_for(tailers, seconds)
        finally:
            out, _ = writer.communicate(timeout=60)
        busy += _poll_for(tailers, 0.5)  # what the writer wrote last
        segments = sum(t.segments for t in tailers)
        recognised = sum(t.recognised for t in tailers)
        skipped = sum(t.follower.skipped for t in tailers)
        close_tailers(tailers)
        events = sum(len(Path(layout.events_file("worker", i)).read_text().splitlines()) for i in range(tasks))
    busy_cpu = sum(busy)
    return {
        "tasks": tasks, "segments_per_s_per_task": rate, "seconds": seconds, "poll_s": POLL,
        "segments_written_per_task": int(out.strip() or 0), "segments_read": segments, "recognised": recognised,
        "bytes_skipped": skipped, "events_written": events, "polls": len(busy),
        "busy_ms_per_poll_mean": round(1e3 * statistics.mean(busy), 3),
        "busy_ms_per_poll_p95": round(1e3 * sorted(busy)[int(0.95 * (len(busy) - 1))], 3),
        "busy_cpu_pct_of_one_core": round(100 * busy_cpu / (len(busy) * POLL), 2),
        "busy_us_per_segment": round(1e6 * busy_cpu / max(segments, 1), 2),
        "idle_ms_per_poll_mean": round(1e3 * statistics.mean(idle), 3),
        **machine(),
    }


def markdown(r: dict[str, Any]) -> str:
    return (
        "# Progress from task logs: supervisor CPU cost\n\n"
        f"{r['tasks']} task logs at {r['segments_per_s_per_task']:g} segments/s each (real TF 2.21 / Keras 3.15 "
        f"output replayed), polled every {r['poll_s']} s for {r['seconds']:g} s; {r['segments_read']} segments "
        f"read, {r['recognised']} recognised, {r['events_written']} progress events written, "
        f"{r['bytes_skipped']} bytes skipped.\n\n"
        "| CPU per poll, mean (ms) | p95 (ms) | % of one core | µs per segment | idle poll (ms) |\n"
        "|---|---|---|---|---|\n"
        f"| {r['busy_ms_per_poll_mean']} | {r['busy_ms_per_poll_p95']} | {r['busy_cpu_pct_of_one_core']} | "
        f"{r['busy_us_per_segment']} | {r['idle_ms_per_poll_mean']} |\n"
        + machine_line(r["cpus"], r["load_avg_1m_at_end"])
    )


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_log_progress")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--rate", type=float, default=100.0, help="segments per second per task")
    args = ap.parse_args()
    result = run(args.seconds, args.tasks, args.rate)
    publish("log_progress", result, markdown(result))
    print(json.dumps({k: result[k] for k in ("busy_ms_per_poll_mean", "busy_cpu_pct_of_one_core")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
