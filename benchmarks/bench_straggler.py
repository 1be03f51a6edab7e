"""The straggler switch, measured: 2 workers, `slowdown = {"worker:1" = 4.0}` vs no straggler, both modes.

Expected (issue 3): between-graph (asynchronous) the fast worker's step rate stays within 10 % of its rate
with no straggler; in-graph (synchronous by construction) every tower slows to the straggler's pace, so
the step rate falls to about 1/4.

Method: real local clusters (1 ps, 2 CPU workers, `mlp`), each a set of `python -m training.task`
processes started from a real plan (testkit/local_cluster.py). The four configurations run one
after another, interleaved round by round (baseline, straggler, baseline, ...) so that a change in the
machine's load hits both sides alike; each figure is the median over rounds of the median per-interval
rate in the run's steady state, and each ratio the median of the per-round (paired) ratios (progress events after the first two, which include start-up; between-graph
only while both workers train). Two variants: "shared" (every process floats over this machine's cores, so
a sleeping straggler hands its CPU to the fast worker) and "pinned" (each worker on its own core, closer to
one machine per worker, but too noisy here to be the default), and "paced" (both workers at slowdown 5,
the straggler at 20: four fifths of each step idle, like device-bound steps, so the two cores are not
saturated and the CPU the straggler leaves idle no longer speeds the fast worker up).

    python -m benchmarks.bench_straggler [--rounds 3] [--quick] [--variants shared,paced,pinned]

Writes benchmarks/results/straggler.json and straggler.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import machine, median_or_none, publish
from testkit.local_cluster import LocalCluster, local_plan, running_cluster

FACTOR = 4.0
PACED_BASE = 5.0  # "paced": every worker idles 4/5 of each step (cores unsaturated), the straggler 4x longer
SKIP_EVENTS = 2  # the first progress events include session start-up and graph warm-up


def steady_rates(events: list[dict[str, Any]], skip: int = SKIP_EVENTS) -> list[float]:
    """Local steps per second in each progress interval of the steady state."""
    rates = []
    for e in events[skip:]:
        steps, interval = e.get("steps", 0), e.get("interval_s", 0.0)
        if steps and interval and interval > 0:
            rates.append(steps / interval)
    return rates


def worker_affinity(pinned: bool) -> dict[str, set[int]]:
    """`pinned`: each worker on its own core (as if on its own machine); ps and client float over all."""
    cpus = sorted(os.sched_getaffinity(0))
    if not pinned or len(cpus) < 2:
        return {}
    return {"worker-0": {cpus[0]}, "worker-1": {cpus[1]}}


def run_cluster(mode: str, straggler: bool, steps: int, workdir: Path, timeout: float,
                variant: str = "shared") -> LocalCluster:
    training: dict[str, Any] = {
        "model": "mlp", "batch_size": 32, "steps": steps, "input": "worker", "progress_interval": 0.5,
        "checkpoint_every_secs": 600.0, "summary_every_steps": 1000,
    }
    base = PACED_BASE if variant == "paced" else 1.0
    slowdown = {"worker:0": base, "worker:1": base * (FACTOR if straggler else 1.0)}
    training["slowdown"] = {k: v for k, v in slowdown.items() if v > 1.0}
    plan = local_plan(mode, ps=1, workers=2, training=training)
    run_dir = Path(tempfile.mkdtemp(prefix=f"{mode}-{'slow' if straggler else 'base'}-", dir=workdir))
    with running_cluster(plan, run_dir, affinity=worker_affinity(variant == "pinned")) as cluster:
        codes = cluster.wait(timeout)
        if any(rc != 0 for rc in codes.values()):
            raise RuntimeError(f"{mode} straggler={straggler}: exit codes {codes}\n{cluster.logs_tail(15)}")
    return cluster


def overlap(*streams: list[dict[str, Any]], skip: int = SKIP_EVENTS) -> tuple[float, float]:
    """The time window in which every stream is past its start-up events and not yet finished."""
    starts = [s[skip]["t"] for s in streams if len(s) > skip]
    ends = [s[-1]["t"] for s in streams if s]
    if len(starts) < len(streams):
        return (0.0, -1.0)
    return (max(starts), min(ends))


def measure_between(cluster: LocalCluster) -> dict[str, float | None]:
    """Worker 0 (the fast one; it is also the chief) and worker 1, in local steps per second, counted only
    while both are training: on 2 shared cores a worker running alone is faster, which is not the point."""
    fast, slow = cluster.events("worker", 0), cluster.events("worker", 1)
    start, end = overlap(fast, slow)

    def window(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # an interval counts when it lies inside the window (an event closes the interval before it)
        return [e for e in events if e["t"] - e.get("interval_s", 0.0) >= start and e["t"] <= end]

    return {
        "fast_worker_steps_per_s": median_or_none(steady_rates(window(fast), skip=0)),
        "slow_worker_steps_per_s": median_or_none(steady_rates(window(slow), skip=0)),
        "overlap_s": max(0.0, end - start),
    }


def measure_in_graph(cluster: LocalCluster) -> dict[str, float | None]:
    """Every tower runs once per (synchronous) step: the client's step rate is each tower's rate."""
    events = cluster.events("chief", 0)[SKIP_EVENTS:]
    compute = {name: median_or_none([e["towers"][name]["compute_s"] for e in events if name in e.get("towers", {})])
               for name in ("worker-0", "worker-1")}
    return {
        "tower_steps_per_s": median_or_none(steady_rates(cluster.events("chief", 0))),
        "step_s": median_or_none([e["step_s"] for e in events if "step_s" in e]),
        "fast_tower_compute_s": compute["worker-0"],
        "slow_tower_compute_s": compute["worker-1"],
        "slow_tower_delay_s": median_or_none([e["towers"]["worker-1"]["delay_s"] for e in events
                                              if "worker-1" in e.get("towers", {})]),
    }


def _median_of(rounds: list[dict[str, float | None]], key: str) -> float | None:
    return median_or_none([r[key] for r in rounds if r.get(key) is not None])  # type: ignore[misc]


def _paired(slow: list[dict[str, float | None]], base: list[dict[str, float | None]], key: str) -> list[float]:
    out = []
    for s_round, b_round in zip(slow, base, strict=False):
        r = _ratio(s_round.get(key), b_round.get(key))
        if r is not None:
            out.append(r)
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


CONFIGS = (
    ("bg_base", "between-graph", False),
    ("bg_slow", "between-graph", True),
    ("ig_base", "in-graph", False),
    ("ig_slow", "in-graph", True),
)


def summarize(raw: dict[str, list[dict[str, float | None]]]) -> dict[str, Any]:
    fast_base = _median_of(raw["bg_base"], "fast_worker_steps_per_s")
    fast_slow = _median_of(raw["bg_slow"], "fast_worker_steps_per_s")
    slow_slow = _median_of(raw["bg_slow"], "slow_worker_steps_per_s")
    ig_base = _median_of(raw["ig_base"], "tower_steps_per_s")
    ig_slow = _median_of(raw["ig_slow"], "tower_steps_per_s")
    # Paired per round (baseline and straggler ran back to back): robust to the load drifting between rounds.
    bg_ratio = median_or_none(_paired(raw["bg_slow"], raw["bg_base"], "fast_worker_steps_per_s"))
    ig_ratio = median_or_none(_paired(raw["ig_slow"], raw["ig_base"], "tower_steps_per_s"))
    return {
        "between_graph": {
            "fast_worker_steps_per_s_no_straggler": fast_base,
            "fast_worker_steps_per_s_with_straggler": fast_slow,
            "slow_worker_steps_per_s_with_straggler": slow_slow,
            "fast_worker_rate_ratio": bg_ratio,  # median over rounds of (with straggler / without)
            "fast_worker_rate_ratio_per_round": _paired(raw["bg_slow"], raw["bg_base"], "fast_worker_steps_per_s"),
            "fast_worker_within_10pct": None if bg_ratio is None else abs(bg_ratio - 1.0) <= 0.10,
            # on shared cores a sleeping straggler hands its CPU to the fast worker, which then speeds up
            "fast_worker_not_slowed": None if bg_ratio is None else bg_ratio >= 0.90,
            "slow_to_fast_ratio": _ratio(slow_slow, fast_slow),
        },
        "in_graph": {
            "tower_steps_per_s_no_straggler": ig_base,
            "tower_steps_per_s_with_straggler": ig_slow,
            "tower_rate_ratio": ig_ratio,  # median over rounds of (with straggler / without)
            "tower_rate_ratio_per_round": _paired(raw["ig_slow"], raw["ig_base"], "tower_steps_per_s"),
            "expected_ratio": 1.0 / FACTOR,
            "step_s_no_straggler": _median_of(raw["ig_base"], "step_s"),
            "step_s_with_straggler": _median_of(raw["ig_slow"], "step_s"),
            "fast_tower_compute_s_with_straggler": _median_of(raw["ig_slow"], "fast_tower_compute_s"),
            "slow_tower_delay_s_with_straggler": _median_of(raw["ig_slow"], "slow_tower_delay_s"),
            "every_tower_at_straggler_pace": None if ig_ratio is None else ig_ratio <= 1.5 / FACTOR,
        },
        "raw": raw,
    }


def bench(rounds: int, steps_between: int, steps_in_graph: int, timeout: float,
          variants: tuple[str, ...] = ("shared", "paced", "pinned")) -> dict[str, Any]:
    raw: dict[str, dict[str, list[dict[str, float | None]]]] = {v: {key: [] for key, _, _ in CONFIGS} for v in variants}
    with tempfile.TemporaryDirectory(prefix="bench-straggler-") as tmp:
        workdir = Path(tmp)
        for r in range(rounds):
            for variant in variants:
                for key, mode, slow in CONFIGS:
                    steps = steps_between if mode == "between-graph" else steps_in_graph
                    measure = measure_between if mode == "between-graph" else measure_in_graph
                    started = time.monotonic()
                    cluster = run_cluster(mode, slow, steps, workdir, timeout, variant=variant)
                    figures = measure(cluster)
                    raw[variant][key].append(figures)
                    print(f"round {r + 1}/{rounds} {variant} {key}: {figures} "
                          f"({time.monotonic() - started:.0f}s)", flush=True)
    return {
        "benchmark": "straggler",
        "slowdown": {"worker:1": FACTOR},
        "cluster": "1 ps, 2 CPU workers, model mlp, batch 32 per worker/tower, input=worker, local processes",
        "variants": {
            "shared": "every task floats over all cores (the workers compete for the same 2 cores)",
            "pinned": "worker-0 and worker-1 each pinned to its own core (one 'machine' each); ps and client float",
            "paced": "every worker at slowdown 5 (4/5 of each step idle, like a device-bound step that leaves the "
                     "host CPU free), the straggler at 20 = 4x the others; the cores are not saturated, so a "
                     "sleeping straggler has no CPU to hand over",
        },
        "machine": machine(),
        "rounds": rounds,
        "results": {v: summarize(raw[v]) for v in variants},
    }


def _fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def variant_table(name: str, result: dict[str, Any]) -> list[str]:
    bg, ig = result["between_graph"], result["in_graph"]
    return [
        f"## {name}",
        "",
        "| mode | measured | no straggler | worker:1 at 4x | ratio (median of per-round ratios) |",
        "|---|---|---|---|---|",
        f"| between-graph | fast worker (worker:0) steps/s | {_fmt(bg['fast_worker_steps_per_s_no_straggler'])} "
        f"| {_fmt(bg['fast_worker_steps_per_s_with_straggler'])} | {_fmt(bg['fast_worker_rate_ratio'], 3)} |",
        f"| between-graph | slow worker (worker:1) steps/s | | {_fmt(bg['slow_worker_steps_per_s_with_straggler'])} "
        f"| {_fmt(bg['slow_to_fast_ratio'], 3)} of the fast one |",
        f"| in-graph | every tower, steps/s | {_fmt(ig['tower_steps_per_s_no_straggler'])} "
        f"| {_fmt(ig['tower_steps_per_s_with_straggler'])} | {_fmt(ig['tower_rate_ratio'], 3)} (1/4 = 0.25) |",
        f"| in-graph | step time, s | {_fmt(ig['step_s_no_straggler'], 4)} | {_fmt(ig['step_s_with_straggler'], 4)} | |",
        "",
        "Per-round ratios: between-graph fast worker "
        + ", ".join(_fmt(r, 3) for r in bg["fast_worker_rate_ratio_per_round"])
        + "; in-graph towers " + ", ".join(_fmt(r, 3) for r in ig["tower_rate_ratio_per_round"]) + ".",
        "",
        f"- between-graph fast worker within 10 % of its no-straggler rate: **{_fmt(bg['fast_worker_within_10pct'])}**; "
        f"not slowed (ratio >= 0.9): **{_fmt(bg['fast_worker_not_slowed'])}** (on shared cores the sleeping straggler "
        "frees CPU that the fast worker then uses, so it can get faster than without a straggler)",
        f"- in-graph towers at the straggler's pace (ratio <= 1.5/4): **{_fmt(ig['every_tower_at_straggler_pace'])}**; "
        f"the fast tower still computes in {_fmt(ig['fast_tower_compute_s_with_straggler'], 4)} s per step and waits, "
        f"the straggler sleeps {_fmt(ig['slow_tower_delay_s_with_straggler'], 4)} s per step on its own device.",
        "",
    ]


def to_markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Straggler: slowdown 4x on worker:1 of 2",
        "",
        f"{result['cluster']}; {result['machine']['cpus']} CPUs (shared with other work: load "
        f"{result['machine']['load_avg_1m_at_end']:.1f} at the end); median of {result['rounds']} interleaved "
        "rounds of the steady-state progress intervals (between-graph: only while both workers train).",
        "",
    ]
    if result.get("note"):
        lines += [f"Note: {result['note']}", ""]
    for variant, figures in result["results"].items():
        lines += variant_table(f"{variant}: {result['variants'][variant]}", figures)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1 round, fewer steps (a smoke run)")
    parser.add_argument("--variants", default="shared,paced,pinned",
                        help="comma-separated: shared, paced, pinned (pinned was too noisy on a 2-core box shared "
                             "with other work)")
    args = parser.parse_args(argv)
    rounds = 1 if args.quick else args.rounds
    steps_between, steps_in_graph = (1500, 120) if args.quick else (2500, 300)
    variants = tuple(v for v in args.variants.split(",") if v in ("shared", "paced", "pinned"))
    result = bench(rounds, steps_between, steps_in_graph, timeout=300.0, variants=variants or ("shared",))
    publish("straggler", result, to_markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
