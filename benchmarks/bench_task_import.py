"""A built-in task's `import tensorflow`, with and without Keras' eager load (training/task.py skip_eager_keras).

Why: `import tensorflow` imports Keras 3 at once (and matplotlib through it), though the built-in models never
touch tf.keras; every ps, worker and chief of a run pays it, on every start and restart. The task entry point
now tells TF to skip it for built-in models.

Method: a round starts a fresh `python -c` that imports `training.task`, builds the environment the task
would (`skip_eager_keras` on a built-in model's plan, or nothing: "eager keras", what a user's
`pkg.module:build` model still gets), then imports tensorflow; it reports its own CPU time (user + sys,
resource.getrusage) and wall time. Rounds alternate the two variants so both see the same load; medians.

    python -m benchmarks.bench_task_import [--rounds 9]

Writes benchmarks/results/task_import.json and task_import.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

from benchmarks.common import footer, now_utc, publish

VARIANTS = ("skip keras", "eager keras")
CHILD = """
import json, os, resource, sys, time
t0 = time.perf_counter()
from types import SimpleNamespace
from training.task import skip_eager_keras
model = sys.argv[1]
skip_eager_keras(SimpleNamespace(plan={"training": {"model": model}}))
import tensorflow
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"cpu_s": ru.ru_utime + ru.ru_stime, "wall_s": time.perf_counter() - t0,
                  "keras_loaded": "keras.src" in sys.modules}))
"""


def _round(variant: str) -> dict[str, Any]:
    model = "mlp" if variant == "skip keras" else "my_pkg.model:build"
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    out = subprocess.run([sys.executable, "-c", CHILD, model], env=env, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def run(rounds: int) -> dict[str, Any]:
    for variant in VARIANTS:  # warm-up: the page cache holds TF's shared libraries for both
        _round(variant)
    samples: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    for i in range(rounds):
        for variant in VARIANTS if i % 2 == 0 else VARIANTS[::-1]:
            samples[variant].append(_round(variant))
    med = {v: {k: round(statistics.median(s[k] for s in samples[v]), 3) for k in ("cpu_s", "wall_s")}
           for v in VARIANTS}
    return {
        "benchmark": "task_import",
        "rounds": rounds,
        "median": med,
        "keras_loaded": {v: sorted({s["keras_loaded"] for s in samples[v]}) for v in VARIANTS},
        "cpu_saved_s": round(med["eager keras"]["cpu_s"] - med["skip keras"]["cpu_s"], 3),
        "cpus": os.cpu_count(),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "measured_at": now_utc(),
    }


def to_markdown(r: dict[str, Any]) -> str:
    m = r["median"]
    lines = [
        "# task_import: a built-in task's `import tensorflow`, Keras' eager load skipped or not",
        "",
        f"Fresh `python` per round, {r['rounds']} alternating rounds per variant, medians.",
        "",
        "| variant | CPU s (user + sys) | wall s | Keras loaded |",
        "|---|---|---|---|",
    ]
    for v in VARIANTS:
        lines.append(f"| {v} | {m[v]['cpu_s']} | {m[v]['wall_s']} | {r['keras_loaded'][v]} |")
    lines += [
        "",
        f"Skipping Keras saves **{r['cpu_saved_s']} s of CPU** per built-in task start (a user's own "
        "`model = \"pkg.module:build\"` keeps the eager load: it may use tf.keras).",
        "",
        footer(r["cpus"], r["load_average_at_end"], r["measured_at"]),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_task_import")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    result = run(args.rounds)
    publish("task_import", result, to_markdown(result))


if __name__ == "__main__":
    main()
