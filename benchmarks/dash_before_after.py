"""Before/after for the 1024-task dashboard, under the same load: rounds of benchmarks/dash_scale.py run
alternately from an older source tree (`--before DIR`, e.g. `git archive <commit> | tar -x -C DIR`) and
from this one, each in its own process with its own sshd, agents and collector; medians per side. The
machine is shared: alternating rounds is what makes the two sides comparable when it is loaded.

    python -m benchmarks.dash_before_after --before DIR [--label COMMIT] [--rounds 2] [--seconds 20]

Adds a `before_after` section to benchmarks/results/dash.json and dash.md (written by bench_dash).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, ROOT, load_now

KEYS = ("cpu_pct_of_one_core", "frame_ms_median", "frame_ms_p95", "events_per_s")


def one_round(tree: Path, seconds: float) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "benchmarks.dash_scale", "--seconds", str(seconds)], cwd=tree,
                         env={**os.environ, "PYTHONPATH": str(tree)},
                         check=True, capture_output=True, text=True, timeout=900).stdout
    result: dict[str, Any] = json.loads(out[out.index("{"):])
    return {k: result[k] for k in KEYS}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, type=Path)
    ap.add_argument("--label", default="before")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    sides: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    loads: list[list[float]] = []
    for _ in range(args.rounds):
        for side, tree in (("before", args.before), ("after", ROOT)):
            loads.append(load_now())
            sides[side].append(one_round(tree, args.seconds))
            print(side, sides[side][-1], flush=True)
    medians = {side: {k: round(statistics.median(r[k] for r in rounds), 2) for k in KEYS}
               for side, rounds in sides.items()}
    section = {"before": args.label, "rounds_per_side": args.rounds, "seconds_per_round": args.seconds,
               "medians": medians, "rounds": sides, "load_1m_before_each_round": [x[0] for x in loads]}
    data = json.loads((RESULTS / "dash.json").read_text())
    data["before_after"] = section
    (RESULTS / "dash.json").write_text(json.dumps(data, indent=2) + "\n")
    md = (RESULTS / "dash.md").read_text().split("\n## Before/after")[0].rstrip("\n")
    b, a = medians["before"], medians["after"]
    md += (f"\n\n## Before/after, 1024 tasks over SSH, under the same load\n\n"
           f"{args.rounds} rounds per side of {args.seconds:g} s, alternating (benchmarks/dash_before_after.py): "
           f"`{args.label}` (the benchmark alone, before any optimisation, its agents sending every 0.25 s as the "
           "agent did then) and this tree. 1-minute load before each round: "
           f"{', '.join(str(x[0]) for x in loads)} on 2 cores (a shared machine, loaded in some rounds: absolute "
           "figures are inflated; alternating rounds make the two sides comparable).\n\n| | CPU (% of one core) | frame ms median | p95 | events/s |\n|---|---|---|---|---|\n"
           f"| before | {b['cpu_pct_of_one_core']} | {b['frame_ms_median']} | {b['frame_ms_p95']} | {b['events_per_s']} |\n"
           f"| after | {a['cpu_pct_of_one_core']} | {a['frame_ms_median']} | {a['frame_ms_p95']} | {a['events_per_s']} |\n")
    (RESULTS / "dash.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
