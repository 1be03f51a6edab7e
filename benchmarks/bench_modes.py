"""The replication modes compared through the real CLI: `tfcluster bench` over a real sshd per loopback machine.

Three experiments, each run once per round (rounds interleave, each after a quiet-machine check,
benchmarks/common.py), merged into one report per experiment (the rounds are its repeats) whose PNGs
and table `tfcluster bench --report` draws:

1. comparison: every mode, 1 and 2 workers, mlp, plus worker:1 slowed 4x at 2 workers (shared cores);
2. straggler_paced: between-graph and in-graph at 2 workers, every worker paced at slowdown 5 and the
   straggler at 20 (bench_straggler's "paced": on 2 shared cores a sleeping straggler hands its CPU to the
   fast worker, which then speeds up; pacing leaves idle time in every step, as on device-bound machines);
3. ps_ceiling: between-graph, `wide` with `params` parameters (16 MB on the PS at 4e6), 1 and 2 workers,
   `--measure-nic` (the link ps:0 ↔ worker:0 measured before the cells of each round, TCP and TF gRPC).

The quiet-machine check comes before each round; during it, other work may still start (the machine is
shared). Each cell's agents sample the machine's CPU and each task's: what the machine spent beyond
the run's tasks is other work (`other_cores`). A round whose cells saw more than OTHER_LIMIT cores of
other work is measured again (at most ATTEMPTS times; the attempts it replaced are listed, and a round
left contaminated says so).

Targets (issue 16), each the median over rounds of the per-round (paired) figure, with `meets_target`:
- with a 4x straggler, between-graph keeps its fast worker at >= 90 % of its unstraggled rate and in-graph
  drops every tower to <= 35 %;
- measured (kernel) and accounted (workers) PS traffic agree within 10 % (wide model);
- predicted and measured PS ceilings agree within 25 % where the PS is saturated (wide, 2 workers).

    python -m benchmarks.bench_modes [--rounds 3] [--seconds 15] [--params 4000000] [--quick]

Writes benchmarks/results/modes.json and modes.md, and benchmarks/results/modes/<experiment>/ (bench.json,
the PNGs and figures.json).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, ROOT, publish, require_quiet
from orchestrator.bench import report as bench_report
from orchestrator.bench.spec import ALL_MODES
from orchestrator.bench.summary import rows, straggler_effects
from testkit import sshd

OUT = RESULTS / "modes"
OTHER_LIMIT = 0.5  # cores of other work during a cell (a quarter of this 2-core machine)
ATTEMPTS = 3
TRAINING = {"model": "mlp", "batch_size": 32, "progress_interval": 1.0}


def experiments(seconds: float, params: int) -> dict[str, dict[str, list[str]]]:
    """Each experiment as units of one `tfcluster bench` each (one per mode: a unit measured while other
    work ran is measured again on its own)."""
    common = ["--seconds", f"{seconds:g}", "--warmup", "3"]
    straggler = ["--straggler", "worker:1=4"]
    return {
        "comparison": {mode: ["--modes", mode, "--workers", "1,2", *straggler, *common] for mode in ALL_MODES},
        "straggler_paced": {mode: ["--modes", mode, "--workers", "2", *straggler, "--pace", "5", *common]
                            for mode in ("between-graph", "in-graph")},
        "ps_ceiling": {"between-graph": ["--modes", "between-graph", "--workers", "1,2", "--model", "wide",
                                         "--model-arg", f"params={params}", "--measure-nic", *common]},
    }


def run_cli(hosts: Path, state: Path, out: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """`tfcluster bench` as a user runs it. Interrupted, it gets SIGTERM (its Ctrl-C path: it stops the
    running cell's cluster) and is waited for, never SIGKILLed with a cluster up."""
    env = {**os.environ, "TFCLUSTER_STATE_DIR": str(state), "PYTHONPATH": str(ROOT), "COLUMNS": "220",
           "MPLBACKEND": "Agg"}
    argv = [sys.executable, "-m", "tfcluster", "bench", str(hosts), *args, "--out", str(out)]
    with subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=3600)
        except BaseException:
            proc.terminate()
            proc.communicate(timeout=120)
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def other_cores(cell: bench_report.CellResult) -> float | None:
    """Cores the machine spent beyond the run's tasks during the cell's window: the agents' machine CPU %
    (every loopback host is this machine: one host's samples) minus the tasks' own CPU."""
    if cell.window is None or cell.figures is None or not cell.samples.hosts:
        return None
    first_host = cell.samples.hosts[0].host
    busy = [h.cpu_pct for h in cell.samples.hosts if h.host == first_host and h.cpu_pct is not None
            and cell.window[0] <= h.t <= cell.window[1]]
    if not busy:
        return None
    machine = statistics.fmean(busy) / 100 * (os.cpu_count() or 1)
    return max(0.0, machine - sum(cell.figures.cpu_pct.values()) / 100)


def worst_other(path: Path) -> float | None:
    values = [v for c in bench_report.load(path).cells if (v := other_cores(c)) is not None]
    return max(values) if values else None


def merge(rounds: list[list[Path]]) -> bench_report.BenchReport:
    """The rounds' reports as one: round r's cells (from each of its units) become repeat r; the link is
    each round's (the unit that measured one)."""
    per_round = [[bench_report.load(p) for p in paths] for paths in rounds]
    first = per_round[0][0]
    merged = dataclasses.replace(first, cells=[])
    links = [next((u.link for u in units if u.link.get("measurements")), units[0].link) for units in per_round]
    capacities = [float(link["capacity_Bps"]) for link in links if link.get("capacity_Bps")]
    merged.link = {**links[0], "capacity_Bps": statistics.median(capacities) if capacities else 0.0,
                   "per_round": links}
    for i, units in enumerate(per_round):
        for u in units:
            merged.cells += [dataclasses.replace(c, cell=dataclasses.replace(c.cell, repeat=i)) for c in u.cells]
    merged.machine = {"cpus": first.machine.get("cpus"),
                      "load_before": [u.machine.get("load_before") for units in per_round for u in units],
                      "load_after": [u.machine.get("load_after") for units in per_round for u in units]}
    merged.interrupted = any(u.interrupted for units in per_round for u in units)
    return merged


def straggler_verdict(report: bench_report.BenchReport) -> dict[str, Any]:
    effects = {e.mode: e for e in straggler_effects(report, "worker:1")}
    out: dict[str, Any] = {}
    bg = effects.get("between-graph")
    if bg is not None:
        fast = bg.ratios.get("worker:0")
        out["between_graph"] = {"fast_worker_ratio": fast, "per_round": bg.per_repeat.get("worker:0"),
                                "straggler_ratio": bg.ratios.get("worker:1"), "target": ">= 0.90",
                                "meets_target": fast is not None and fast >= 0.90}
    ig = effects.get("in-graph")
    if ig is not None:
        worst = max(ig.ratios.values()) if ig.ratios else None
        out["in_graph"] = {"tower_ratios": ig.ratios, "per_round": ig.per_repeat, "target": "every tower <= 0.35",
                           "meets_target": worst is not None and worst <= 0.35}
    return out


def ps_verdict(report: bench_report.BenchReport) -> dict[str, Any]:
    """Per worker count: measured/accounted PS traffic, and measured per-worker rate / predicted ceiling
    (each round against its own link measurement), medians over rounds."""
    out: dict[str, Any] = {}
    for workers in sorted({c.cell.workers for c in report.cells}):
        cells = [c for c in report.cells if c.ok and c.cell.workers == workers and c.figures and c.ceiling]
        traffic = [c.figures.ps["ps:0"].measured_over_accounted for c in cells if c.figures and "ps:0" in c.figures.ps]
        ceilings, tcp_ceilings = [], []
        for c in cells:
            assert c.figures is not None
            assert c.ceiling is not None
            rates = list(c.figures.per_worker_steps_per_s.values())
            predicted = float(c.ceiling["steps_per_s_per_worker"])
            ceilings.append(statistics.fmean(rates) / predicted)
            tcp = _tcp_capacity(report, c.cell.repeat)
            if tcp:
                tcp_ceilings.append(statistics.fmean(rates) / (predicted * tcp / float(c.ceiling["capacity_Bps"])))
        ratio = statistics.median(ceilings) if ceilings else None
        agree = statistics.median([t for t in traffic if t is not None]) if traffic else None
        out[f"w{workers}"] = {
            "measured_over_accounted": agree, "measured_over_accounted_per_round": traffic,
            "traffic_meets_target": agree is not None and abs(agree - 1) <= 0.10,
            "measured_over_predicted_ceiling": ratio, "per_round": ceilings,
            "measured_over_predicted_with_raw_tcp_link": statistics.median(tcp_ceilings) if tcp_ceilings else None,
            "ceiling_meets_target": ratio is not None and abs(ratio - 1) <= 0.25,
        }
    return out


def _tcp_capacity(report: bench_report.BenchReport, round_index: int) -> float | None:
    rounds = report.link.get("per_round") or []
    if round_index >= len(rounds):
        return None
    return next((float(m["both_ways_Bps"]) for m in rounds[round_index].get("measurements", [])
                 if m["method"] == "tcp"), None)


def measure_unit(hosts: Path, work: Path, label: str, args: list[str]) -> tuple[Path, dict[str, Any]]:
    """One unit after a quiet-machine check, measured again while other work took more than OTHER_LIMIT
    cores during its cells (at most ATTEMPTS times; the cleanest attempt is kept)."""
    attempts: list[tuple[float, Path, dict[str, Any]]] = []
    for attempt in range(ATTEMPTS):
        check = require_quiet(f"bench_modes {label}")
        out = work / f"{label.replace(' ', '-')}-{attempt}"
        result = run_cli(hosts, work / "state", out, args)
        if result.returncode not in (0, 1):  # 1: some cell failed, recorded in the report
            raise RuntimeError(f"tfcluster bench ({label}) exited {result.returncode}:\n{result.stderr[-2000:]}")
        other = worst_other(out / "bench.json")
        print(f"{label} attempt {attempt + 1}: exit {result.returncode}, other work up to "
              f"{'?' if other is None else round(other, 2)} cores", flush=True)
        attempts.append((0.0 if other is None else other, out / "bench.json", check))
        if other is not None and other <= OTHER_LIMIT:
            break
    other, best, check = min(attempts, key=lambda a: a[0])
    return best, {**check, "other_cores_max": round(other, 2), "attempts": len(attempts),
                  "contaminated": other > OTHER_LIMIT}


def run(rounds: int, seconds: float, params: int) -> dict[str, Any]:
    plan = experiments(seconds, params)
    round_files: dict[str, list[list[Path]]] = {name: [[] for _ in range(rounds)] for name in plan}
    loads: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-modes-") as tmp:
        work = Path(tmp)
        machines = sshd.start_machines(3)
        try:
            hosts = machines.hosts_toml(work / "hosts.toml", roles=[["ps"], ["worker"], ["worker"]], training=TRAINING)
            for r in range(rounds):
                for name, units in plan.items():
                    for unit, args in units.items():
                        path, check = measure_unit(hosts, work, f"round {r + 1} {name} {unit}", args)
                        round_files[name][r].append(path)
                        loads.append({"round": r + 1, "experiment": f"{name} {unit}", **check})
            summary: dict[str, Any] = {}
            for name, paths in round_files.items():
                merged = merge(paths)
                bench_report.save(merged, OUT / name / "bench.json")
                drawn = subprocess.run([sys.executable, "-m", "tfcluster", "bench", "--report",
                                        str(OUT / name / "bench.json")], check=True, cwd=ROOT, capture_output=True,
                                       text=True, env={**os.environ, "COLUMNS": "220", "MPLBACKEND": "Agg"})
                summary[name] = {"table": drawn.stdout, "rows": [_row_json(r) for r in rows(merged)],
                                 "failed_cells": [f"{c.cell.key}: {c.error}" for c in merged.cells if not c.ok]}
                if name != "ps_ceiling":
                    summary[name]["straggler"] = straggler_verdict(merged)
                else:
                    summary[name]["ps"] = ps_verdict(merged)
                    summary[name]["link_per_round"] = merged.link.get("per_round")
        finally:
            machines.close()
    return {"benchmark": "modes", "rounds": rounds, "seconds_per_cell": seconds, "wide_params": params,
            "cluster": "3 loopback machines over real sshd: m0 ps, m1 worker, m2 worker; mlp batch 32 (wide: batch 32)",
            "experiments": {name: {unit: " ".join(args) for unit, args in units.items()} for name, units in plan.items()},
            "round_load_checks": loads, "results": summary}


def _row_json(r: Any) -> dict[str, Any]:
    return {"mode": r.mode, "workers": r.workers, "variant": r.variant, "ok": r.ok, "failed": r.failed,
            "examples_per_s": r.examples_per_s, "examples_range": r.examples_range, "updates_per_s": r.updates_per_s,
            "per_worker_steps_per_s": r.per_worker, "client_cpu_pct": r.client_cpu_pct,
            "time_to_target_loss_s": r.time_to_loss_s, "ps_measured_Bps": r.ps_measured_Bps,
            "ps_accounted_Bps": r.ps_accounted_Bps, "predicted_ceiling_steps_per_s": r.predicted_steps_per_s,
            "measured_steps_per_s_per_worker": r.measured_steps_per_s}


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return "yes" if x else "**no**"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


MISSED = {
    "bg": "the fast worker lost pace although it does not wait for the straggler: on 2 shared cores it competes "
          "with the PS, the agents and other work for CPU; one machine per worker (or pinning) would show its own pace",
    "ig": "the towers did not drop to the straggler's pace: the straggler's sleep is (factor - 1) x the step time "
          "measured by the client, so a client-bound step dilutes it; a heavier model per tower would show 1/4",
    "traffic": "the kernel counts gRPC framing and control messages the workers do not account; larger tensors "
               "(more `params`) shrink that share",
    "ceiling": "on loopback the link is CPU copies shared with the workers' compute and the PS's updates; the TF "
               "gRPC probe measures the copies alone. On machines with a real NIC the link, not the CPU, would bind",
}


def target_rows(result: dict[str, Any]) -> list[tuple[str, str, str, Any, str]]:
    """(experiment, target, measured, meets, note)."""
    out: list[tuple[str, str, str, Any, str]] = []
    for name in ("straggler_paced", "comparison"):
        verdict = result["results"].get(name, {}).get("straggler", {})
        bg, ig = verdict.get("between_graph"), verdict.get("in_graph")
        if bg:
            per = ", ".join(_fmt(x) for x in bg["per_round"] or [])
            out.append((name, "between-graph fast worker >= 0.90 of its rate without the straggler",
                        f"{_fmt(bg['fast_worker_ratio'])} (rounds: {per})", bg["meets_target"],
                        "" if bg["meets_target"] else MISSED["bg"]))
        if ig:
            towers = ", ".join(f"{t} {_fmt(v)}" for t, v in ig["tower_ratios"].items())
            out.append((name, "in-graph every tower <= 0.35 of its rate without the straggler", towers,
                        ig["meets_target"], "" if ig["meets_target"] else MISSED["ig"]))
    for workers, v in result["results"].get("ps_ceiling", {}).get("ps", {}).items():
        rounds = ", ".join(_fmt(x) for x in v["measured_over_accounted_per_round"] if x is not None)
        out.append(("ps_ceiling", f"{workers}: PS traffic measured / accounted within 1 ± 0.10",
                    f"{_fmt(v['measured_over_accounted'])} (rounds: {rounds})", v["traffic_meets_target"],
                    "" if v["traffic_meets_target"] else MISSED["traffic"]))
        rounds = ", ".join(_fmt(x) for x in v["per_round"])
        out.append(("ps_ceiling", f"{workers}: measured per-worker steps/s / predicted PS ceiling within 1 ± 0.25",
                    f"{_fmt(v['measured_over_predicted_ceiling'])} (rounds: {rounds}; against the raw TCP link: "
                    f"{_fmt(v['measured_over_predicted_with_raw_tcp_link'])})", v["ceiling_meets_target"],
                    "" if v["ceiling_meets_target"] else MISSED["ceiling"]))
    return out


def to_markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Replication modes compared: `tfcluster bench` over real sshd",
        "",
        f"{result['cluster']}; {result['rounds']} interleaved rounds, {result['seconds_per_cell']:g} s measured per "
        "cell after a 3 s warm-up; every figure the median over rounds (per-round pairs for ratios). Each round "
        "of each experiment started only on a quiet machine (1-minute load at most the core count).",
        "",
        "## Targets",
        "",
        "| experiment | target | measured | meets_target | what would change the picture |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {e} | {t} | {m} | {_fmt(ok)} | {note} |" for e, t, m, ok, note in target_rows(result)]
    for name, units in result["experiments"].items():
        res = result["results"].get(name, {})
        cmds = "; ".join(f"`tfcluster bench hosts.toml {cmd}`" for cmd in units.values())
        lines += ["", f"## {name}", "", f"{cmds} (each once per round), merged: "
                  f"[bench.json](modes/{name}/bench.json), figures: "
                  + ", ".join(f"[{f.stem}](modes/{name}/{f.name})" for f in sorted((OUT / name).glob("*.png"))),
                  "", "```text", res.get("table", "").rstrip(), "```"]
        if res.get("failed_cells"):
            lines += ["", "Failed cells: " + "; ".join(res["failed_cells"])]
        if res.get("link_per_round"):
            links = [", ".join(f"{m['method']} {m['both_ways_Bps'] / 1e6:,.0f} MB/s" for m in link.get("measurements", []))
                     for link in res["link_per_round"]]
            lines += ["", "Link ps:0 ↔ worker:0 per round (both ways at once): " + "; ".join(links) + "."]
    lines += ["", "## The machine during each round", "",
              "| round | experiment | 1-min load before | other work during its cells (max, cores) | attempts |",
              "|---|---|---|---|---|"]
    lines += [f"| {x['round']} | {x['experiment']} | {x['load_before'][0]} | {x['other_cores_max']}"
              f"{' (**contaminated**: above ' + str(OTHER_LIMIT) + ')' if x['contaminated'] else ''} | {x['attempts']} |"
              for x in result["round_load_checks"]]
    lines += ["", "Other work = the machine's CPU (the agents' samples) minus the run's tasks' CPU, in the measured "
              f"window; a round above {OTHER_LIMIT} cores was measured again (at most {ATTEMPTS} attempts, the "
              "cleanest kept).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--params", type=int, default=4_000_000)
    parser.add_argument("--quick", action="store_true", help="1 round of 5 s cells (a smoke run)")
    args = parser.parse_args(argv)
    rounds, seconds = (1, 5.0) if args.quick else (args.rounds, args.seconds)
    result = run(rounds, seconds, args.params)
    publish("modes", result, to_markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
