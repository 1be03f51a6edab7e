"""The dashboard at 256 and 1024 tasks, 1 Hz (issue 5: 256 tasks < 15 % of one core; issue 15: 1024 tasks
on 128 hosts <= 15 % of a core with parsing and SSH decryption included, frame p95 < 50 ms).

Two rows, measured in interleaved rounds (256, 1024, 256, 1024, ...), medians reported:

- 256 tasks, replay: a synthetic cluster (testkit/synthetic.py: 248 workers on 32 hosts, 8 PS tasks;
  every second one progress event per worker and a heartbeat and host sample per host, ~330 events/s)
  is replayed in real time, as typed events (no SSH, no parsing), into the real DashboardApp.
  Event generation happens before the clock starts and is not counted.
- 1024 tasks, SSH: 128 hosts over real sshd, every byte through Paramiko and the collector's parser,
  the agents' lines at the real agent's formats and rates (benchmarks/dash_scale.py says what is real
  and what is simulated), each round in a fresh process (sshd, agents and dashboard started for it).

Both run the real DashboardApp (Textual, headless driver, 160x50) polling once a second, its default.
Measured over the steady state: this process's CPU time (user + system, every thread) over wall time,
and the frame time per poll: the poll (+ reducer) plus every view's update of it (header, task table,
PS panel, event log), summed (tui/messages.py FrameCost); Textual's repaint afterwards counts in the
CPU, not in the frame. The headless driver skips writing escape codes to a terminal, so a real
terminal adds a little on top. Before each round the machine's load is checked (benchmarks/common.py);
when no quiet moment comes within --max-wait the round runs anyway and the results say LOADED.

    python -m benchmarks.bench_dash [--seconds 30] [--rounds 3] [--max-wait 300]

Writes benchmarks/results/dash.json and dash.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from typing import Any

import psutil

from benchmarks import common
from benchmarks.dash_scale import SSHD, cpu_s, frame_stats
from testkit.replay import ReplaySource
from testkit.synthetic import Scenario, build
from tui.app import DashboardApp

TARGET_PCT, TARGET_P95_MS = 15.0, 50.0


async def _replay(seconds: float, tasks: int, warmup: float) -> dict[str, Any]:
    ps = 8
    sc = Scenario(workers=tasks - ps, ps=ps, hosts=32, seconds=int(seconds + warmup + 5))
    state, events = build(sc)
    wall0 = time.time()

    def clock() -> float:  # the synthetic history unrolls in real time
        return sc.start + (time.time() - wall0)

    source = ReplaySource(state, events, clock)
    app = DashboardApp(source, None, readonly=True, interval=1.0)
    proc = psutil.Process()
    async with app.run_test(size=(160, 50)) as pilot:
        await asyncio.sleep(warmup)
        frames0 = len(app.frame_times)
        c0, w0 = cpu_s(proc), time.monotonic()
        await asyncio.sleep(seconds)
        c1, w1 = cpu_s(proc), time.monotonic()
        frames = list(app.frame_times)[frames0:]
        due = sum(1 for a, _ in source._pending[source._next:] if a <= clock())  # arrived, not applied
        rows = app.tasks_table.row_count
        await pilot.press("q")
    return {"tasks": tasks, "rows": rows, "hosts": 32 + ps, "seconds": round(w1 - w0, 2),
            "events_per_s": round(sum(1 for a, _ in events if sc.start + 10 <= a < sc.start + 11), 1),
            "cpu_pct_of_one_core": round(100.0 * (c1 - c0) / (w1 - w0), 2), **frame_stats(frames),
            "events_queued_after_last_poll": due}


def _check_load(what: str, max_wait: float) -> dict[str, Any]:
    try:
        return {**common.require_quiet(what, max_wait_s=max_wait), "proceeded_loaded": False}
    except common.MachineBusy as exc:
        print(f"{exc}: measuring anyway, marked LOADED", flush=True)
        return {"cpus": common.cores(), "load_before": common.load_now(), "waited_s": max_wait,
                "proceeded_loaded": True}


def _median_row(rounds: list[dict[str, Any]], **fixed: Any) -> dict[str, Any]:
    keys = ("cpu_pct_of_one_core", "frame_ms_median", "frame_ms_p95", "frame_ms_max", "events_per_s",
            "events_queued_after_last_poll")
    row = {**fixed, **{k: v for k, v in rounds[0].items() if k in ("tasks", "rows", "hosts")}}
    for k in keys:
        values = [r[k] for r in rounds if r.get(k) is not None]
        row[k] = round(statistics.median(values), 2) if values else None
    row["meets_target"] = bool(row["cpu_pct_of_one_core"] is not None and row["cpu_pct_of_one_core"] <= TARGET_PCT
                               and row["frame_ms_p95"] is not None and row["frame_ms_p95"] < TARGET_P95_MS)
    row["rounds"] = rounds
    return row


def _scale_round(seconds: float) -> dict[str, Any]:
    """One 1024-task round in a process of its own, as `tfcluster dash` runs: measured in the same
    process after the replay's app, the rounds came out ~1.3x costlier and fell behind (not explained)."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.dash_scale", "--seconds", str(seconds)],
                         cwd=common.ROOT, check=True, capture_output=True, text=True, timeout=900).stdout
    result: dict[str, Any] = json.loads(out[out.index("{"):])
    return result


def run(seconds: float, rounds: int, max_wait: float) -> dict[str, Any]:
    replays: list[dict[str, Any]] = []
    scales: list[dict[str, Any]] = []
    for r in range(rounds):
        load = _check_load(f"dash round {r + 1}, 256 tasks", max_wait)
        replays.append({**asyncio.run(_replay(seconds, 256, 5.0)), "load": load, "load_after": common.load_now()})
        print(f"round {r + 1}, 256 tasks: {replays[-1]['cpu_pct_of_one_core']} % of a core", flush=True)
        load = _check_load(f"dash round {r + 1}, 1024 tasks", max_wait)
        scales.append({**_scale_round(seconds), "load": load, "load_after": common.load_now()})
        print(f"round {r + 1}, 1024 tasks: {scales[-1]['cpu_pct_of_one_core']} % of a core, frame p95 "
              f"{scales[-1]['frame_ms_p95']} ms, by thread {scales[-1]['cpu_pct_by_thread']}", flush=True)
    loaded = any(x["load"]["proceeded_loaded"] for x in replays + scales)
    return {
        "benchmark": "dash", "target_pct": TARGET_PCT, "target_frame_p95_ms": TARGET_P95_MS,
        "seconds_per_round": seconds, "rounds": rounds, "measured_at": common.now_utc(),
        "rows": [_median_row(replays, variant="replay: typed events, no SSH, no parsing"),
                 _median_row(scales, variant=f"SSH: 128 hosts over {SSHD} real sshd, Paramiko + parser included")],
        "proceeded_loaded": loaded,
    }


def to_markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Dashboard at 256 and 1024 tasks, 1 Hz\n",
        f"Textual headless 160x50, refresh every 1 s (the default), {result['seconds_per_round']:g} s measured per "
        f"round, medians of {result['rounds']} interleaved rounds. CPU is the dashboard process's own (every "
        "thread: SSH readers, collector streams, poll and reducer, Textual); frame = the poll plus every view's "
        "update, summed (Textual's repaint after it counts in the CPU only). Target: CPU <= "
        f"{result['target_pct']:g} % of one core and frame p95 < {result['target_frame_p95_ms']:g} ms.\n",
        "| tasks | hosts | events | events/s | CPU (% of one core) | frame ms median | p95 | max | "
        "queued after the last poll | meets target |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        lines.append(f"| {row['tasks']} | {row['hosts']} | {row['variant']} | {row['events_per_s']} | "
                     f"{row['cpu_pct_of_one_core']} | {row['frame_ms_median']} | {row['frame_ms_p95']} | "
                     f"{row['frame_ms_max']} | {row['events_queued_after_last_poll']} | {row['meets_target']} |")
    scale = result["rows"][1]["rounds"]
    lines += ["", "1024 tasks, CPU by thread kind (% of one core, each round): "
              + "; ".join(", ".join(f"{k} {v}" for k, v in r["cpu_pct_by_thread"].items() if not k.endswith("system"))
                          for r in scale) + ".", "",
              "Load (1/5/15 min) before and after each round: " + "; ".join(
                  f"{'256' if i % 2 == 0 else '1024'}: {x['load']['load_before']} -> {x['load_after']}"
                  + (" LOADED" if x["load"]["proceeded_loaded"] else "")
                  for i, x in enumerate(_interleave(result["rows"][0]["rounds"], scale))) + "."]
    if result["proceeded_loaded"]:
        lines += ["", f"The machine ({common.cores()} cores, shared) was LOADED by other work during some rounds "
                  "(no quiet moment came in time): those CPU figures are inflated, upper bounds."]
    return "\n".join(lines) + "\n"


def _interleave(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [x for pair in zip(a, b, strict=True) for x in pair]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-wait", type=float, default=300.0, help="seconds to wait for a quiet machine per round")
    args = ap.parse_args()
    result = run(args.seconds, args.rounds, args.max_wait)
    result["machine_load"] = common.load_record()
    md = to_markdown(result)
    json_path, md_path = common.write_results("dash", result, md)
    print(md)
    print(f"wrote {json_path} and {md_path}")


if __name__ == "__main__":
    main()
