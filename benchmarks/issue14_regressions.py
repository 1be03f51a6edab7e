"""Issue 14's regression tests run against the code from before the fixes and against the current code:
benchmarks/results/issue14_regressions.md and .json.

    python -m benchmarks.issue14_regressions --before /path/to/checkout-before-the-fixes [--after PATH]

Runs `pytest tests/integration/test_issue14_regressions.py` of this repo twice, with $TFCLUSTER_CHECKOUT
naming the checkout whose CLI the tests drive (the code before the fixes, then --after: this repo by
default), each with a JUnit XML report, and writes one row per problem: the test, its result and key
failure line before, its result after, and the seconds each took (setup + call + teardown as pytest
timed them; the shared run of tests 2 and 5 is started in test 2's setup). Not a `bench_*` module: it
needs a second checkout, so `python -m benchmarks` does not run it. The machine is shared: its load
before and after each run is recorded beside the figures.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from benchmarks import common

NAME = "issue14_regressions"
TEST_FILE = "tests/integration/test_issue14_regressions.py"
PROBLEMS = {  # test name -> issue 14's problem, in the issue's order
    "test_second_start_on_the_same_hosts_leaves_the_first_run_alone": "1. a second run on the same hosts",
    "test_restarted_chief_never_rolls_the_global_step_back": "2. a restarted chief rolls the cluster back",
    "test_placeholders_inside_quotes_stay_literal": "3. placeholders inside quotes",
    "test_stray_run_records_and_markup_in_an_address_never_make_a_traceback": "4. stray run records, markup",
    "test_lost_task_is_lost_for_dash_too_and_exit_codes_say_so": "5. dead tasks shown alive, exit codes",
}


def commit_of(checkout: Path) -> str:
    res = subprocess.run(["git", "-C", str(checkout), "log", "-1", "--format=%h%n%s"], capture_output=True,
                         text=True, check=False)
    short, _, subject = res.stdout.strip().partition("\n")
    return f"{short or '?'} ({subject[:60]}{'…' if len(subject) > 60 else ''})"


def run_tests(checkout: Path) -> dict[str, Any]:
    """pytest of the test file with the CLI of `checkout`: its outcome per test, wall time and load."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        env = {**os.environ, "TFCLUSTER_CHECKOUT": str(checkout), "TFCLUSTER_REGRESSIONS": "1"}
        load_before, started = common.load_now(), time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TEST_FILE,
                               f"--junitxml={report}"], cwd=common.ROOT, env=env, capture_output=True, text=True,
                              check=False)
        wall = round(time.monotonic() - started, 1)
        tests = {}
        for case in ET.parse(report).getroot().iter("testcase"):
            problem = case.find("failure")
            if problem is None:
                problem = case.find("error")
            first = "" if problem is None else (problem.get("message") or "").strip().splitlines()[0]
            tests[case.get("name", "?")] = {
                "result": "pass" if problem is None else ("FAIL" if problem.tag == "failure" else "ERROR"),
                "seconds": round(float(case.get("time", "0")), 1), "message": first}
    summary = (proc.stdout.strip().splitlines() or [""])[-1]
    return {"checkout": str(checkout), "commit": commit_of(checkout), "exit": proc.returncode, "wall_s": wall,
            "summary": summary, "load_before": load_before, "load_after": common.load_now(), "tests": tests}


def cell(text: str, limit: int = 420) -> str:
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(before: dict[str, Any], after: dict[str, Any]) -> str:
    lines = [
        "# Issue 14: each problem reproduced by a test that failed before the fix and passes after",
        "",
        f"`{TEST_FILE}` (CLI-level: `python -m tfcluster` subprocesses, real sshd machines, real TensorFlow), "
        "run with `TFCLUSTER_CHECKOUT` naming the checkout whose CLI it drives "
        "(`python -m benchmarks.issue14_regressions`).",
        "",
        f"- before: `{before['checkout']}` at {before['commit']}: {before['summary']} ({before['wall_s']} s)",
        f"- after: `{after['checkout']}` at {after['commit']}: {after['summary']} ({after['wall_s']} s)",
        "",
        "| problem | test | before (key failure line) | s | after | s |",
        "|---|---|---|---|---|---|",
    ]
    for test, problem in PROBLEMS.items():
        b = before["tests"].get(test, {"result": "missing", "seconds": "", "message": ""})
        a = after["tests"].get(test, {"result": "missing", "seconds": "", "message": ""})
        said = f"{b['result']}: {cell(b['message'])}" if b["message"] else b["result"]
        now = f"{a['result']}: {cell(a['message'])}" if a["message"] else a["result"]
        lines.append(f"| {problem} | `{test}` | {said} | {b['seconds']} | {now} | {a['seconds']} |")
    lines += [
        "",
        "Seconds are pytest's per test (setup + call + teardown); the run shared by tests 2 and 5 starts in "
        "test 2's setup. A failing test before the fix often stops early (it fails at the first sign of "
        "its problem), so its seconds are not comparable with the passing one's.",
        "",
        f"Machine: {common.cores()} CPUs shared with other engineers' work; load average (1/5/15 min) before "
        f"and after each run: before the fixes {before['load_before']} → {before['load_after']}, current code "
        f"{after['load_before']} → {after['load_after']}. Measured {common.now_utc()}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="checkout of the code before the fixes")
    parser.add_argument("--after", type=Path, default=common.ROOT, help="checkout of the fixed code (this repo)")
    args = parser.parse_args(argv)
    before = run_tests(args.before.resolve())
    after = run_tests(args.after.resolve())
    md = markdown(before, after)
    common.write_results(NAME, {"before": before, "after": after}, md)
    print(md)
    expected = all(t["result"] == "FAIL" for t in before["tests"].values()) and after["exit"] == 0
    return 0 if expected and len(before["tests"]) == len(PROBLEMS) else 1


if __name__ == "__main__":
    sys.exit(main())
