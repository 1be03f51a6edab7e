"""Before/after for the 1024-task dashboard, under the same load: rounds of benchmarks/dash_scale.py run
alternately from an older source tree (`--before DIR`, e.g. `git archive <commit> | tar -x -C DIR`) and
from this one, each in its own process with its own sshd, agents and collector; medians per side. The
machine is shared: alternating rounds is what makes the two sides comparable when it is loaded.

    python -m benchmarks.dash_before_after --before DIR [--label COMMIT] [--what TEXT] [--rounds 2] [--seconds 20]

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
    ap.add_argument("--what", default="an older tree", help="what the before side is, for the results file")
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
    section = {"before": args.label, "what": args.what, "rounds_per_side": args.rounds,
               "seconds_per_round": args.seconds, "medians": medians, "rounds": sides,
               "load_1m_before_each_round": [x[0] for x in loads]}
    write_section(section)


def write_section(section: dict[str, Any]) -> None:
    """Put the section into dash.json and (replacing an older one) at the end of dash.md."""
    data = json.loads((RESULTS / "dash.json").read_text())
    data["before_after"] = section
    (RESULTS / "dash.json").write_text(json.dumps(data, indent=2) + "\n")
    md = (RESULTS / "dash.md").read_text().split("\n## Before/after")[0].rstrip("\n")
    b, a = section["medians"]["before"], section["medians"]["after"]
    loads = ", ".join(str(x) for x in section["load_1m_before_each_round"])
    md += (f"\n\n## Before/after, 1024 tasks over SSH, under the same load\n\n"
           f"{section['rounds_per_side']} rounds per side of {section['seconds_per_round']:g} s, alternating "
           f"(benchmarks/dash_before_after.py): `{section['before']}` ({section['what']}) and this tree. "
           f"1-minute load before each round: {loads} on 2 cores (a shared machine: alternating rounds make "
           "the two sides comparable).\n\n| | CPU (% of one core) | frame ms median | p95 | events/s |\n|---|---|---|---|---|\n"
           f"| before | {b['cpu_pct_of_one_core']} | {b['frame_ms_median']} | {b['frame_ms_p95']} | {b['events_per_s']} |\n"
           f"| after | {a['cpu_pct_of_one_core']} | {a['frame_ms_median']} | {a['frame_ms_p95']} | {a['events_per_s']} |\n")
    (RESULTS / "dash.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
