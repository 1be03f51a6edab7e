"""What a worker joining and leaving costs each mode, through the real CLI: `tfcluster bench --resize` over a
real sshd per loopback machine (issue 37, build item 4).

Three loopback machines (m0 ps, m1 worker, m2 worker), mlp batch 32, hosts.toml's default checkpoints
(every 500 steps or 60 s: the steps a restarting mode can lose). Every mode at 1 worker, its baseline cell
and its resize cell: worker:1 (on m2) joins `--resize-at` seconds into the window and leaves that long
after it stepped. Two `tfcluster bench` runs, as a user types them:
1. `--modes all` on the asynchronous hosts.toml (between-graph async, in-graph, multi-worker-mirrored,
   parameter-server-strategy);
2. `--modes between-graph` on the same machines with `[training] sync_replicas = true` (synchronous
   between-graph).
A mode the resize refuses today is a failed resize cell with the refusal line: it is listed as refused.

    python -m benchmarks.bench_resize [--resize-at 8] [--warmup 3] [--accept-load]

`--accept-load` measures without waiting for a quiet machine and writes the figures with the load it saw
(before, after, and at each run's start) stated at the top as LOADED when it was above the core count; without
it, as every benchmark, it waits for a quiet moment and refuses to write after a loaded one.

Writes benchmarks/results/resize.json and resize.md, and benchmarks/results/resize/<run>/ (bench.json, the
PNGs, figures.json: `tfcluster bench --report` redraws them).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_modes import run_cli
from benchmarks.common import (
    RESULTS,
    cores,
    load_now,
    load_record,
    now_utc,
    publish,
    require_quiet,
    write_results,
)
from orchestrator.bench import report as bench_report
from orchestrator.bench.summary import ResizeEvent, resize_events
from testkit import sshd

OUT = RESULTS / "resize"
TRAINING: dict[str, object] = {"model": "mlp", "batch_size": 32, "progress_interval": 1.0}
RUNS = {"async": ("all", {}), "sync": ("between-graph", {"sync_replicas": True})}
STALL_SANE_S = 0.5  # below one progress interval's half, a "stall" would be a measuring error
DRIFT = 1.5  # 1 worker before the join vs after the leave: beyond this the load moved, not the resize


def command(hosts: str, modes: str, at: float, warmup: float, out: str) -> list[str]:
    """The user's command; the baseline cells measure as long as the resize cells' three phases."""
    return ["tfcluster", "bench", hosts, "--modes", modes, "--workers", "1", "--seconds", f"{3 * at:g}",
            "--resize-at", f"{at:g}s", "--warmup", f"{warmup:g}", "--out", out]


def label(mode: str, run: str) -> str:
    if mode == "between-graph":
        return "between-graph (sync)" if run == "sync" else "between-graph (async)"
    return mode


def event_json(e: ResizeEvent, run: str) -> dict[str, Any]:
    return {"mode": label(e.mode, run), "workers": f"{e.workers} -> {e.workers + (1 if e.event == 'join' else -1)}",
            "event": e.event, "tasks": e.tasks, "hosts": e.hosts, "restarted": e.restarted, "took_s": e.took_s,
            "stepping_again_after_s": e.stepping_after_s, "stall_s": e.stall_s, "resumed": e.resumed,
            "steps_lost": e.steps_lost, "global_step_before": e.step_before, "resumed_from_step": e.resumed_from,
            "examples_per_s_before": e.examples_before,
            "examples_per_s_after": e.examples_after}


def doubts(events: list[dict[str, Any]]) -> list[str]:
    """The figures that look wrong, said plainly."""
    out = []
    for e in events:
        where = f"{e['mode']} {e['event']}"
        if e["stall_s"] is not None and e["stall_s"] < STALL_SANE_S:
            out.append(f"{where}: a stall of {e['stall_s']:.2f} s is below the progress interval's resolution")
        if not e["resumed"]:
            out.append(f"{where}: the global step did not advance again before the window ended")
        if e["mode"] == "between-graph (async)" and e["steps_lost"]:
            out.append(f"{where}: {e['steps_lost']} steps lost in the live mode (nothing restarts there)")
        last, resumed = e["global_step_before"], e["resumed_from_step"]
        # (in-graph resumes from the variables its ps tasks kept: from where it was, nothing lost)
        if e["restarted"] and e["mode"] != "in-graph" and last is not None and resumed is not None and resumed > last:
            out.append(f"{where}: 0 steps lost, but a lower bound: the restarted run resumed from step {resumed:,}, "
                       f"above the last it reported ({last:,}); the steps it made between that checkpoint and the "
                       "restart are not seen")
        before, after = e["examples_per_s_before"], e["examples_per_s_after"]
        if after is not None and before and e["event"] == "join" and after < before:
            out.append(f"{where}: fewer examples/s with 2 workers than with 1 ({after:,.0f} < {before:,.0f}): "
                       "every task of the run shares this machine's 2 cores with the other work on it")
    by_mode: dict[str, dict[str, Any]] = {}
    for e in events:
        by_mode.setdefault(e["mode"], {})[e["event"]] = e
    for mode, pair in by_mode.items():
        alone_before = pair.get("join", {}).get("examples_per_s_before")
        alone_after = pair.get("leave", {}).get("examples_per_s_after")
        if alone_before and alone_after and not 1 / DRIFT <= alone_after / alone_before <= DRIFT:
            out.append(f"{mode}: with 1 worker, {alone_after:,.0f} examples/s after the leave against "
                       f"{alone_before:,.0f} before the join (x{alone_after / alone_before:.2f}): the same cluster "
                       "shape, so the difference is the machine's load (other work) or the run's warm-up, not the "
                       "resize")
    return out


def run(at: float, warmup: float, accept_load: bool = False) -> dict[str, Any]:
    results: dict[str, Any] = {"events": [], "refused": [], "failed": [], "commands": [], "tables": {},
                               "load_checks": []}
    with tempfile.TemporaryDirectory(prefix="bench-resize-") as tmp:
        work = Path(tmp)
        machines = sshd.start_machines(3)
        try:
            for name, (modes, extra) in RUNS.items():
                hosts = machines.hosts_toml(work / f"hosts-{name}.toml", roles=[["ps"], ["worker"], ["worker"]],
                                            training={**TRAINING, **extra})
                check = ({"cpus": cores(), "load_before": load_now(), "waited_s": 0.0} if accept_load
                         else require_quiet(f"bench_resize {name}"))
                results["load_checks"].append({"run": name, **check})
                out = work / name
                args = command(str(hosts), modes, at, warmup, str(out))
                shown = command(f"hosts-{name}.toml", modes, at, warmup, f"benchmarks/results/resize/{name}")
                results["commands"].append(" ".join(shown) + (f"   # [training] {extra}" if extra else ""))
                started = time.monotonic()
                done = run_cli(hosts, work / "state", out, args[3:-2])
                print(f"{name}: exit {done.returncode} in {time.monotonic() - started:.0f} s", flush=True)
                if done.returncode not in (0, 1):  # 1: some cell failed (a refused mode), recorded in the report
                    raise RuntimeError(f"tfcluster bench ({name}) exited {done.returncode}:\n{done.stderr[-2000:]}")
                results["tables"][name] = done.stdout
                report = bench_report.load(out / "bench.json")
                results["events"] += [event_json(e, name) for e in resize_events(report)]
                for c in report.cells:
                    if not c.ok:
                        refused = c.cell.variant == "resize" and "not built yet" in (c.error or "")
                        results["refused" if refused else "failed"].append(
                            {"mode": label(c.cell.mode, name), "cell": c.cell.key, "error": c.error})
                shutil.rmtree(OUT / name, ignore_errors=True)
                shutil.copytree(out, OUT / name)
        finally:
            machines.close()
    return {"benchmark": "resize", "date": now_utc(), "resize_at_s": at, "warmup_s": warmup,
            "cluster": "3 loopback machines over real sshd: m0 ps, m1 worker, m2 worker (joins); mlp batch 32; "
                       "checkpoints as hosts.toml's defaults (every 500 steps or 60 s)",
            **results, "doubts": doubts(results["events"])}


def _f(x: Any, unit: str = "") -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.0f}{unit}" if abs(x) >= 100 else f"{x:.1f}{unit}"
    return f"{x}{unit}"


def to_markdown(r: dict[str, Any]) -> str:
    loaded = [c for c in r["load_checks"] if c["load_before"][0] > c["cpus"]]
    lines = [
        "# What a worker joining and leaving costs each mode: `tfcluster bench --resize`",
        "",
        *([f"**Measured on a LOADED machine** (1-minute load {', '.join(str(c['load_before'][0]) for c in loaded)} "
           f"on {loaded[0]['cpus']} cores at the runs' starts, other work included): every time below is "
           "inflated by that load.", ""] if loaded else []),
        f"Measured {r['date']}. {r['cluster']}. The join {r['resize_at_s']:g} s into each resize cell's window, "
        "the leave that long after the joined worker stepped, the window's end that long after the leave.",
        "",
        "Commands:",
        "",
        *[f"    {c}" for c in r["commands"]],
        "",
        "| mode | workers | event | resize took | every trainer stepping again after | longest without a global "
        "step | steps lost | restarted | examples/s before | examples/s after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in r["events"]:
        stall = _f(e["stall_s"], " s") + ("" if e["resumed"] else " (not again)")
        lines.append(f"| {e['mode']} | {e['workers']} | {e['event']} {', '.join(e['tasks'])} ({', '.join(e['hosts'])}) "
                     f"| {_f(e['took_s'], ' s')} | {_f(e['stepping_again_after_s'], ' s')} | {stall} "
                     f"| {_f(e['steps_lost'])} | {', '.join(e['restarted']) or '-'} "
                     f"| {_f(e['examples_per_s_before'])} | {_f(e['examples_per_s_after'])} |")
    for x in r["refused"]:
        lines.append(f"| {x['mode']} | 1 -> 2 | refused | {x['error']} | | | | | | |")
    lines += ["", "How to read it: \"longest without a global step\" is the longest gap between progress reports "
              "whose global step advanced, from the last one before the resize was asked until the next change "
              "(or the window's end); progress is reported once a second, so a run that never stalls shows about "
              "1 s. \"steps lost\" is the last global step the reference task (the chief, else worker:0) reported "
              "before a restart minus the step its new process resumed from (its first report's global step less "
              "its own steps since); the steps made after that last report are not seen, so it can undercount by "
              "up to a second's steps. \"every trainer stepping again after\" runs from when the resize was asked "
              "until every trainer of the new shape had reported a step made after the resize returned. "
              "Examples/s: before the join, between the joined worker's first steps and the leave, and after the "
              "run stepped again."]
    if r["failed"]:
        lines += ["", "Failed cells (not refusals):", ""] + [f"- {x['cell']}: {x['error']}" for x in r["failed"]]
    lines += ["", "Figures that look wrong:", ""] + ([f"- {d}" for d in r["doubts"]] or ["- none seen"])
    lines += ["", "The runs' tables, PNGs and bench.json: benchmarks/results/resize/<async|sync>/ "
              "(`tfcluster bench --report benchmarks/results/resize/async/bench.json` redraws them)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resize-at", type=float, default=8.0, help="seconds (see --resize-at of tfcluster bench)")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--accept-load", action="store_true", help="measure on a loaded machine, saying so")
    args = parser.parse_args(argv)
    result = run(args.resize_at, args.warmup, args.accept_load)
    if not args.accept_load:
        publish("resize", result, to_markdown(result))
        return 0
    load = load_record()
    data = {**result, "machine_load": load}
    markdown = to_markdown(data).rstrip("\n") + (
        f"\n\nMachine load (1/5/15 min) on {load['cpus']} cores: before {load['load_before']} (measured without "
        f"waiting for a quiet moment, --accept-load), after {load['load_after']}.\n")
    for path in write_results("resize", data, markdown):
        print(f"wrote {path}")
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
