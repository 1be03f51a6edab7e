"""Examples per second of the four modes on this machine: between-graph, in-graph, multi-worker-mirrored,
parameter-server-strategy; 2 CPU workers (+ 1 ps where the mode has one), `mlp` with its default model
args and the default batch_size (128 per worker), with and without `slowdown = {"worker:1" = 4.0}`.

Method: each configuration is a real local cluster (one `python -m training.task` process per task, started
from a plan's run.json: testkit/local_cluster.py, testkit/tf2_cluster.py) run for WINDOW_S seconds
of steady state (after every trainer's first SKIP_EVENTS progress events), then stopped. The cluster's
examples/s in each 1-second window is the sum over the trainers' cumulative `examples` (progress events,
linearly interpolated at the window's edges); a run's figure is the median over its windows, a
configuration's the median over rounds. Configurations are interleaved round by round so that the
machine's load drifts over all of them alike. Trainers: between-graph and multi-worker-mirrored: the worker
tasks; in-graph: the client; parameter-server-strategy: the per-worker events the coordinator writes.

    python -m benchmarks.bench_tf2_modes [--rounds 3] [--window 15] [--modes ...]

Writes benchmarks/results/tf2_modes.json and tf2_modes.md. Figures, not assertions: the machine is shared.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import footer, now_utc, publish
from testkit.local_cluster import LocalCluster, local_plan, running_cluster
from testkit.tf2_cluster import tf2_plan

MODES = ("between-graph", "in-graph", "multi-worker-mirrored", "parameter-server-strategy")
FACTOR = 4.0
SKIP_EVENTS = 2
START_TIMEOUT_S = 120.0
TRAINING: dict[str, Any] = {"model": "mlp", "steps": 10_000_000, "progress_interval": 0.5,
                            "checkpoint_every_secs": 3600.0, "summary_every_steps": 100_000}


def plan_for(mode: str, slow: bool) -> Any:
    training = {**TRAINING, "slowdown": {"worker:1": FACTOR} if slow else {}}
    if mode in ("between-graph", "in-graph"):
        return local_plan(mode, ps=1, workers=2, training={**training, "input": "worker"})
    return tf2_plan(mode, workers=2, ps=1 if mode == "parameter-server-strategy" else 0, training=training)


def trainers(mode: str) -> list[tuple[str, int]]:
    return [("chief", 0)] if mode == "in-graph" else [("worker", 0), ("worker", 1)]


def interp(points: list[tuple[float, float]], t: float) -> float:
    """Cumulative examples at time t (linear between events; flat outside them)."""
    if t <= points[0][0]:
        return points[0][1]
    for (t0, e0), (t1, e1) in itertools.pairwise(points):
        if t <= t1:
            return e0 + (e1 - e0) * (t - t0) / max(1e-9, t1 - t0)
    return points[-1][1]


def window_rates(streams: list[list[dict[str, Any]]], window_s: float = 1.0) -> list[float]:
    """Cluster examples/s in each window where every stream is past its start-up events."""
    start = max(s[SKIP_EVENTS]["t"] for s in streams)
    end = min(s[-1]["t"] for s in streams)
    curves = [[(e["t"], float(e["examples"])) for e in s] for s in streams]
    rates = []
    t = start
    while t + window_s <= end:
        rates.append(sum(interp(c, t + window_s) - interp(c, t) for c in curves) / window_s)
        t += window_s
    return rates


def measure(mode: str, slow: bool, window: float, workdir: Path) -> dict[str, Any]:
    plan = plan_for(mode, slow)
    run_dir = Path(tempfile.mkdtemp(prefix=f"{mode}-{'slow' if slow else 'base'}-", dir=workdir))
    who = trainers(mode)
    with running_cluster(plan, run_dir) as cluster:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not all(len(cluster.events(j, i)) > SKIP_EVENTS for j, i in who):
            _check_alive(cluster, mode)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{mode}: no steady progress after {START_TIMEOUT_S:g} s\n{cluster.logs_tail(15)}")
            time.sleep(0.2)
        time.sleep(window)
        _check_alive(cluster, mode)
        streams = [cluster.events(j, i) for j, i in who]
    rates = window_rates(streams)
    per_task = {f"{j}-{i}": round(statistics.median(window_rates([s])), 1) for (j, i), s in zip(who, streams,
                                                                                                 strict=True)}
    return {"examples_per_s": round(statistics.median(rates), 1) if rates else None, "windows": len(rates),
            "per_trainer_examples_per_s": per_task}


def _check_alive(cluster: LocalCluster, mode: str) -> None:
    dead = {n: p.poll() for n, p in cluster.procs.items() if p.poll() is not None}
    if dead:
        raise RuntimeError(f"{mode}: tasks exited early {dead}\n{cluster.logs_tail(15)}")


def bench(modes: tuple[str, ...], rounds: int, window: float) -> dict[str, Any]:
    raw: dict[str, list[dict[str, Any]]] = {f"{m}|{s}": [] for m in modes for s in ("base", "slow")}
    with tempfile.TemporaryDirectory(prefix="bench-tf2-modes-") as tmp:
        for r in range(rounds):
            for mode in modes:
                for slow in (False, True):
                    figures = measure(mode, slow, window, Path(tmp))
                    raw[f"{mode}|{'slow' if slow else 'base'}"].append(figures)
                    print(f"round {r + 1}/{rounds} {mode} {'slowdown worker:1=4' if slow else 'baseline'}: "
                          f"{figures}", flush=True)
    summary: dict[str, Any] = {}
    for mode in modes:
        b = _median_rate(raw[f"{mode}|base"])
        s = _median_rate(raw[f"{mode}|slow"])
        summary[mode] = {"examples_per_s": b, "examples_per_s_slowdown": s,
                         "slowdown_ratio": round(s / b, 3) if b and s else None}
    return {"benchmark": "tf2_modes", "rounds": rounds, "window_s": window, "summary": summary, "raw": raw}


def _median_rate(runs: list[dict[str, Any]]) -> float | None:
    rates = [float(f["examples_per_s"]) for f in runs if f["examples_per_s"]]
    return statistics.median(rates) if rates else None


def markdown(data: dict[str, Any], load: list[float]) -> str:
    lines = ["# Examples/s of the four modes (2 CPU workers, mlp, batch 128 per worker, local processes)", "",
             "| mode | examples/s | with slowdown worker:1=4 | ratio |", "|---|---:|---:|---:|"]
    for mode, s in data["summary"].items():
        lines.append(f"| {mode} | {s['examples_per_s']} | {s['examples_per_s_slowdown']} | {s['slowdown_ratio']} |")
    lines += ["", f"Median over {data['rounds']} interleaved rounds of the median 1-s window of "
              f"{data['window_s']:g} s steady state per run.", "",
              footer(os.cpu_count(), load, now_utc(), sys.version.split()[0]), ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=15.0, help="steady-state seconds per run")
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()
    data = bench(tuple(m for m in args.modes.split(",") if m), args.rounds, args.window)
    data["machine"] = {"cpus": os.cpu_count(), "load_avg": list(os.getloadavg())}
    publish("tf2_modes", data, markdown(data, list(os.getloadavg())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
