"""What every tfcluster command pays before it does anything: the CLI's start-up, beside `python -c pass`.

Scripts call `tfcluster status` in loops and every test of the CLI starts a fresh interpreter, so the
start-up is paid everywhere (issue 36: the read path's gap to `ssh host true` is mostly this). Measured
here on commands that do no I/O beyond the state directory: `--help`, `ls` (an empty state dir) and
`plan hosts.example.toml`, wall and CPU (user + system of the child) per command, in interleaved rounds
(the order alternates), medians, next to `python -c pass`.

`--before DIR` adds a second side: the same commands with DIR first on PYTHONPATH (e.g. another Typer
unpacked there), so a dependency's effect is measured under the same load as the installed tree.

    python -m benchmarks.bench_cli_start [--rounds 15] [--before DIR --before-label TEXT]

Writes benchmarks/results/cli_start.json and cli_start.md (refused on a busy machine: benchmarks/common.py).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, footer, load_now, medians, now_utc, publish, require_quiet

COMMANDS = {"--help": ["--help"], "ls": ["ls"], "plan": ["plan", str(ROOT / "hosts.example.toml")]}


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and the child's CPU seconds (user + system) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   timeout=120)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(rounds: int, before: Path | None, label: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tfcluster-cli-start-") as state:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
        env["TFCLUSTER_STATE_DIR"] = state
        from importlib.metadata import version  # the installed Typer, named beside the other side

        sides = {f"installed (typer {version('typer')})": env}
        if before is not None:
            sides[label] = {**env, "PYTHONPATH": str(before)}
        cases: list[tuple[str, list[str], dict[str, str]]] = [("python -c pass", [sys.executable, "-c", "pass"], env)]
        for side, side_env in sides.items():
            for name, args in COMMANDS.items():
                cases.append((f"{side}: tfcluster {name}", [sys.executable, "-m", "tfcluster", *args], side_env))
        for _, argv, case_env in cases:  # warm-up: bytecode written, files cached; not counted
            _timed(argv, case_env)
        wall: dict[str, list[float]] = {name: [] for name, _, _ in cases}
        cpu: dict[str, list[float]] = {name: [] for name, _, _ in cases}
        for r in range(rounds):
            for name, argv, case_env in (cases if r % 2 == 0 else cases[::-1]):
                w, c = _timed(argv, case_env)
                wall[name].append(w)
                cpu[name].append(c)
    return {"wall_s": {k: round(v, 3) for k, v in medians(wall).items()},
            "cpu_s": {k: round(v, 3) for k, v in medians(cpu).items()}, "samples_wall_s": wall, "samples_cpu_s": cpu}


def to_markdown(data: dict[str, Any]) -> str:
    lines = ["# CLI start-up: what every command pays before it does anything", "",
             f"Each command in a fresh interpreter (`{sys.executable} -m tfcluster ...`, bytecode cached), an empty "
             f"state dir, {data['rounds']} interleaved rounds (the order alternates), medians. Wall and the child's "
             "CPU (user + system).", ""]
    if data.get("before"):
        lines += [f"Second side: `{data['before_label']}` (PYTHONPATH={data['before']}).", ""]
    lines += ["| command | wall s | CPU s |", "|---|---|---|"]
    for name, w in data["result"]["wall_s"].items():
        lines.append(f"| {name} | {w} | {data['result']['cpu_s'][name]} |")
    lines += ["", footer(data["cpus"], data["load_after"], data["measured_at"]),
              f"Load before: {data['load_before']}.", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_cli_start")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--before", type=Path, help="a directory put first on PYTHONPATH for a second side")
    ap.add_argument("--before-label", default="before")
    args = ap.parse_args()
    check = require_quiet("the CLI start-up benchmark")
    result = measure(args.rounds, args.before, args.before_label)
    data = {"measured_at": now_utc(), "rounds": args.rounds, "cpus": check["cpus"], "load_before": check["load_before"],
            "load_after": load_now(), "before": str(args.before) if args.before else None,
            "before_label": args.before_label, "result": result}
    publish("cli_start", data, to_markdown(data))


if __name__ == "__main__":
    main()
