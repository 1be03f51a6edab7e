"""Issues 22 and 32's measurement: consecutive `make test` runs, each on a fresh clone of this checkout's HEAD,
as CI runs it, recorded in benchmarks/results/suite_time.md (and .json): per run its wall time (make test's own
line), its result, the machine's load before and after, the ten slowest tests, each tier's test time and test
count (from pytest's junit XML), and the ten tests with the most CPU with their TensorFlow processes (from the
per-test profile, tests/helpers/profile.py, which each run loads).

    python3 scripts/suite_runs.py [--runs 5] [--workers 3] [--keep]

The clones share pip's cache (so a run's set-up is what a fresh machine with warm wheels pays), not the venv.
Stops at the first failed run (the record says which test failed): the target is five consecutive green
fresh-clone runs, each at most TARGET_S of `make test`. Stdlib only: it runs on the machine's python3.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from stress import TestResult, read_junit  # scripts/stress.py, beside this file

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TARGET_S = 8 * 60
PROFILE_PLUGIN = "tests.helpers.profile"
PROFILE_DIR_ENV = "TFCLUSTER_TEST_PROFILE"  # tests/helpers/profile.py's
TIERS = {"unit": "unit", "integration": "integration (without Slurm)", "slurm": "Slurm", "faults": "faults"}


def make_test_command(workers: int, junit: Path) -> list[str]:
    """`make test` with the slowest tests listed, the junit XML written to `junit` and the profile plugin
    loaded. make hands PYTEST_ARGS to the shell unquoted: the path is quoted for it."""
    pytest_args = f"--durations=10 --junitxml={shlex.quote(str(junit))} -p {PROFILE_PLUGIN}"
    return ["make", "test", f"TEST_WORKERS={workers}", f"PYTEST_ARGS={pytest_args}"]


def tier_of(nodeid: str) -> str:
    """unit (tests/unit), slurm (tests/integration/test_slurm_*.py), integration (the rest of
    tests/integration), faults (tests/faults); `other` for anything else."""
    path = nodeid.split("::", 1)[0]
    folder, _, name = path.removeprefix("tests/").partition("/")
    if folder == "integration" and name.startswith("test_slurm_"):
        return "slurm"
    return folder if folder in TIERS else "other"


def tier_times(results: list[TestResult]) -> dict[str, dict[str, float]]:
    """Per tier, in TIERS' order: {"s": setup + call + teardown summed over its tests (all workers together),
    "tests": how many}."""
    tiers: dict[str, dict[str, float]] = {tier: {"s": 0.0, "tests": 0} for tier in TIERS}
    for r in results:
        tier = tiers.setdefault(tier_of(r.nodeid), {"s": 0.0, "tests": 0})
        tier["s"] = round(tier["s"] + r.seconds, 3)
        tier["tests"] += 1
    return tiers


def read_profiles(directory: Path) -> list[dict[str, Any]]:
    """Every test of the profile files the plugin's processes wrote there (profile-<worker>.json), in one list."""
    merged: list[dict[str, Any]] = []
    for path in sorted(directory.glob("profile-*.json")):
        merged += json.loads(path.read_text(encoding="utf-8"))
    return merged


def top_by_cpu(profile: list[dict[str, Any]], count: int = 10) -> list[dict[str, Any]]:
    """The `count` tests with the most CPU seconds (ties: by node id): {"cpu_s", "wall_s", "tf_processes",
    "test"}."""
    ranked = sorted(profile, key=lambda t: (-float(t["cpu_s"]), str(t["nodeid"])))
    return [{"cpu_s": t["cpu_s"], "wall_s": t["wall_s"], "tf_processes": t["tf_processes"], "test": t["nodeid"]}
            for t in ranked[:count]]


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine so far (/proc/stat's first line; idle and iowait are idle)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def one_run(workers: int) -> dict[str, Any]:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    where = Path(tempfile.mkdtemp(prefix="tfcluster-suite-"))
    clone, figures = where / "tfcluster", where / "figures"
    figures.mkdir()
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    load_before = [round(x, 2) for x in os.getloadavg()]
    busy_before, total_before = cpu_ticks()
    started = time.monotonic()
    junit = figures / "junit.xml"
    done = subprocess.run(make_test_command(workers, junit), cwd=clone, capture_output=True, text=True,
                          check=False, env={**os.environ, PROFILE_DIR_ENV: str(figures)})
    wall = time.monotonic() - started
    load_after = [round(x, 2) for x in os.getloadavg()]
    busy_after, total_after = cpu_ticks()
    out = done.stdout + done.stderr
    own = re.search(r"make test: (\d+) s, exit (\d+)", out)
    summary = re.findall(r"^=*\s*(\d+ (?:passed|failed).*?) in ([\d.]+)s", out, re.M)
    slowest = re.findall(r"^([\d.]+)s (?:call|setup|teardown)\s+(\S+)", out, re.M)[:10]
    failed = re.findall(r"^FAILED (\S+)", out, re.M) + re.findall(r"^ERROR (\S+)", out, re.M)
    profile = read_profiles(figures)
    tiers = tier_times(read_junit(junit.read_text(encoding="utf-8"))) if junit.exists() else None
    log = Path(tempfile.gettempdir()) / f"tfcluster-suite-run-{int(time.time())}.log"  # not kept in the repo
    log.write_text(out, encoding="utf-8")
    shutil.rmtree(where, ignore_errors=True)
    return {"commit": head, "exit": done.returncode, "make_test_s": int(own.group(1)) if own else None,
            "wall_with_setup_s": round(wall, 1), "pytest": summary[-1][0] if summary else "?",
            "pytest_s": float(summary[-1][1]) if summary else None, "failed": failed,
            "load_before": load_before, "load_after": load_after,
            "cpu_busy_pct": round(100 * (busy_after - busy_before) / max(total_after - total_before, 1), 1),
            "tests_cpu_s": round(sum(float(t["cpu_s"]) for t in profile), 1) if profile else None,
            "slowest": [{"s": float(s), "test": t} for s, t in slowest], "workers": workers,
            "tiers": tiers, "top_cpu": top_by_cpu(profile),
            "tf_processes": sum(int(t["tf_processes"]) for t in profile) if profile else None,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "log": str(log)}


def _or_dash(value: object, unit: str = "") -> str:
    return "–" if value is None else f"{value}{unit}"


def tier_line(tiers: dict[str, dict[str, float]]) -> str:
    """`unit 85.2 s (640 tests), integration (without Slurm) 1200.3 s (150 tests), ...`."""
    return ", ".join(f"{TIERS.get(tier, tier)} {t['s']:.1f} s ({int(t['tests'])} tests)"
                     for tier, t in tiers.items() if tier in TIERS or t["tests"])


def markdown(runs: list[dict[str, Any]]) -> str:
    """The record; runs recorded before issue 32 have no tier times, profile or TF processes: `–`."""
    lines = ["# Suite time: `make test` on fresh clones, on this 2-core machine (issues 22 and 32)", "",
             f"Target: five consecutive green fresh-clone runs, each at most {TARGET_S} s of `make test` "
             "(pytest-xdist workers; the clone's venv built first, from warm wheels: `wall with set-up`).", "",
             "Tier times: each test's setup + call + teardown (junit XML), summed over the tier's tests on all "
             "workers; Slurm is tests/integration/test_slurm_*.py. CPU: the test's pytest worker, its CLI "
             "subprocesses and its runs' processes, sampled (a floor: tests/helpers/profile.py); TF processes: "
             "the processes that loaded TensorFlow.", "",
             "| # | commit | result | make test | wall with set-up | load before | load after | TF processes |",
             "|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(runs, 1):
        result = r["pytest"] if r["exit"] == 0 else f"FAILED: {', '.join(r['failed']) or r['pytest']}"
        lines.append(f"| {i} | {r['commit']} | {result} | {_or_dash(r['make_test_s'], ' s')} | "
                     f"{r['wall_with_setup_s']} s | {r['load_before']} | {r['load_after']} | "
                     f"{_or_dash(r.get('tf_processes'))} |")
    for i, r in enumerate(runs, 1):
        if r.get("tiers"):
            lines += ["", f"Tier times of run {i}: {tier_line(r['tiers'])}."]
        if r.get("cpu_busy_pct") is not None:
            lines += ["", f"Run {i}: the machine's CPUs busy {r['cpu_busy_pct']} % of the run (set-up included); "
                      f"the tests' CPU, sampled: {_or_dash(r.get('tests_cpu_s'), ' s')}."]
        lines += ["", f"Ten slowest tests of run {i}:", ""]
        lines += [f"- {x['s']:.2f} s {x['test']}" for x in r["slowest"]]
        if r.get("top_cpu"):
            lines += ["", f"Ten tests by CPU of run {i} (CPU s, wall s, TF processes, test):", ""]
            lines += [f"- {x['cpu_s']:.2f} s CPU, {x['wall_s']:.2f} s wall, {x['tf_processes']} TF: {x['test']}"
                      for x in r["top_cpu"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(prog="python3 scripts/suite_runs.py")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="add to the runs already recorded instead of starting anew")
    args = ap.parse_args()
    recorded = RESULTS / "suite_time.json"
    runs: list[dict[str, Any]] = json.loads(recorded.read_text()) if args.keep and recorded.exists() else []
    for i in range(args.runs):
        r = one_run(args.workers)
        runs.append(r)
        print(f"run {i + 1}: exit {r['exit']}, make test {r['make_test_s']} s, {r['pytest']}", flush=True)
        (RESULTS / "suite_time.json").write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")
        (RESULTS / "suite_time.md").write_text(markdown(runs), encoding="utf-8")
        if r["exit"] != 0:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
