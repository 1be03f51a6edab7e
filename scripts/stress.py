"""`make stress`: a race hunter. Runs the integration and fault tiers ROUNDS times, each round beside one busy
loop per core (a plain `while True: pass` process: the suite then runs as on a loaded CI machine, where a race
that a quiet machine hides shows up), and records every round in benchmarks/results/stress.md (and .json):

    .venv/bin/python scripts/stress.py [--rounds 5] [--workers 3] [--python .venv/bin/python]

Every round runs, whatever the previous one gave; the record is rewritten after each round (an interrupted
stress run still leaves its evidence). Per round: the result (from pytest's junit XML), wall seconds, the load
average before and after, and each failed or errored test with the first line of its failure; then, across
rounds, how often each test failed. Exit 0 only when every round was green, 1 otherwise.

The busy loops are killed after each round in every case: an exception, Ctrl-C, SIGTERM; and on Linux the
kernel kills them if this script is killed outright (PR_SET_PDEATHSIG). pytest runs in its own session: a
Ctrl-C reaches it once, forwarded from here, and its teardown (sshd machines, the Slurm cluster) runs.

`read_junit` is also what scripts/suite_runs.py reads a run's junit XML with.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TIERS_UNDER_STRESS = ("tests/integration", "tests/faults")
BUSY_LOOP = "while True: pass"
TEARDOWN_GRACE_S = 300  # an interrupted pytest's teardown: stopping runs, sshd machines, the Slurm cluster
OUTCOMES = ("passed", "failed", "error", "skipped")
PR_SET_PDEATHSIG = 1  # linux/prctl.h
_LIBC = ctypes.CDLL(None) if sys.platform == "linux" else None  # loaded here, not in a forked child


@dataclass(frozen=True)
class TestResult:
    """One test of a junit XML: its outcome, its seconds (setup + call + teardown) and, when it did not pass,
    the first line of what pytest said."""

    nodeid: str
    outcome: str  # one of OUTCOMES
    seconds: float
    first_line: str = ""


def nodeid_of(classname: str, name: str) -> str:
    """pytest's node id from a junit testcase: `tests.unit.test_a.TestK` + `test_p[1]` is
    `tests/unit/test_a.py::TestK::test_p[1]` (a module's parts are lower case, its classes' are not). A
    collection error has no classname: its name is the module."""
    if not classname:
        return name.replace(".", "/") + ".py"
    parts = classname.split(".")
    module = next((i for i, part in enumerate(parts) if part[:1].isupper()), len(parts))
    return "::".join(["/".join(parts[:module]) + ".py", *parts[module:], name])


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def read_junit(xml_text: str) -> list[TestResult]:
    """Every test of a pytest junit XML, in file order, once: a test that failed and then errored in its
    teardown is two testcases there (their times add up), and counts as failed with the failure's line."""
    merged: dict[str, TestResult] = {}
    for case in ET.fromstring(xml_text).iter("testcase"):
        nodeid = nodeid_of(case.get("classname", ""), case.get("name", ""))
        outcome, line = "passed", ""
        for tag, meaning in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            found = case.find(tag)
            if found is not None:
                outcome, line = meaning, _first_line(found.get("message") or found.text or "")
                break
        result = TestResult(nodeid, outcome, float(case.get("time") or 0.0), line)
        earlier = merged.get(nodeid)
        if earlier is not None:
            worse = min(earlier, result, key=lambda r: ("failed", "error", "skipped", "passed").index(r.outcome))
            result = TestResult(nodeid, worse.outcome, earlier.seconds + result.seconds, worse.first_line)
        merged[nodeid] = result
    return list(merged.values())


def outcome_counts(results: list[TestResult]) -> dict[str, int]:
    return {outcome: sum(r.outcome == outcome for r in results) for outcome in OUTCOMES}


def result_text(counts: dict[str, int]) -> str:
    """`2 failed, 1 error, 118 passed`, as pytest words it (what is zero is left out)."""
    parts = [f"{counts[o]} {o}" + ("s" if o == "error" and counts[o] > 1 else "")
             for o in ("failed", "error", "passed", "skipped") if counts.get(o)]
    return ", ".join(parts) or "no tests"


@dataclass
class Round:
    """One round's facts; green: pytest exited 0 and no test failed or errored."""

    number: int
    pytest_exit: int
    counts: dict[str, int] | None  # None: pytest left no junit XML
    wall_s: float
    load_before: list[float]
    load_after: list[float]
    failures: list[dict[str, str]] = field(default_factory=list)  # {"nodeid", "outcome", "first_line"}

    @property
    def green(self) -> bool:
        return (self.pytest_exit == 0 and self.counts is not None
                and self.counts["failed"] == 0 and self.counts["error"] == 0)

    def result(self) -> str:
        if self.counts is None:
            return f"no junit XML (pytest exit {self.pytest_exit})"
        text = result_text(self.counts)
        no_failure_counted = self.counts["failed"] == 0 and self.counts["error"] == 0
        # e.g. a crashed xdist worker: pytest failed, yet no test did
        return f"{text} (pytest exit {self.pytest_exit})" if self.pytest_exit and no_failure_counted else text


@dataclass
class Stress:
    """What one invocation ran and found: the header facts and the rounds done so far."""

    rounds_asked: int
    workers: int
    busy_loops: int
    commit: str
    started_utc: str
    command: str
    rounds: list[Round] = field(default_factory=list)


def failure_table(rounds: list[Round]) -> list[tuple[str, list[int], str]]:
    """(node id, the rounds it failed or errored in, its first failure line), most failures first."""
    by_test: dict[str, tuple[list[int], str]] = {}
    for r in rounds:
        for failure in r.failures:
            by_test.setdefault(failure["nodeid"], ([], failure["first_line"]))[0].append(r.number)
    return sorted(((nodeid, numbers, line) for nodeid, (numbers, line) in by_test.items()),
                  key=lambda row: (-len(row[1]), row[0]))


def verdict(rounds: list[Round]) -> str:
    failed = sum(not r.green for r in rounds)
    return f"all {len(rounds)} rounds green" if failed == 0 else f"{failed} of {len(rounds)} rounds failed"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or "–"


def markdown(stress: Stress) -> str:
    done = len(stress.rounds)
    ran = f"{stress.rounds_asked} rounds" + (f" ({done} run so far)" if done < stress.rounds_asked else "")
    lines = [
        "# Stress: the integration and fault tiers, round after round, under a busy loop per core (issue 32)", "",
        f"Ran {ran} of `{stress.command}`, each beside {stress.busy_loops} busy loops (`python -c "
        f"\"{BUSY_LOOP}\"`, one per core); {stress.workers} pytest-xdist workers; commit {stress.commit}; "
        f"started {stress.started_utc}. Load average: 1, 5 and 15 minutes, before the busy loops start and "
        "as pytest ends. `make stress` writes this file anew.", "",
        "| round | result | wall | load before | load after | failed or errored |",
        "|---|---|---|---|---|---|",
    ]
    for r in stress.rounds:
        failed = ", ".join(f["nodeid"] for f in r.failures)
        lines.append(f"| {r.number} | {_cell(r.result())} | {r.wall_s:.1f} s | {r.load_before} | "
                     f"{r.load_after} | {_cell(failed)} |")
    table = failure_table(stress.rounds)
    lines += ["", "| test | failed in rounds | first failure line |", "|---|---|---|"]
    lines += [f"| {_cell(nodeid)} | {len(numbers)} ({', '.join(map(str, numbers))}) | {_cell(line)} |"
              for nodeid, numbers, line in table]
    if not table:
        lines.append("| – | – | – |")
    lines += ["", verdict(stress.rounds)]
    return "\n".join(lines) + "\n"


def write_record(stress: Stress, directory: Path) -> None:
    """stress.md and stress.json (the same facts), each replaced whole."""
    facts = {**asdict(stress), "verdict": verdict(stress.rounds)}
    for name, text in (("stress.json", json.dumps(facts, indent=1) + "\n"), ("stress.md", markdown(stress))):
        partial = directory / f".{name}.tmp"
        partial.write_text(text, encoding="utf-8")
        partial.replace(directory / name)


def _die_with_parent() -> None:
    """In a busy loop, before exec: the kernel SIGKILLs it when this script dies, however it dies."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@contextmanager
def busy_loops(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`count` processes spinning on a core each, killed (and reaped) on the way out, whatever happened."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            procs.append(subprocess.Popen(
                [sys.executable, "-c", BUSY_LOOP], stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C is this script's to handle, not theirs
                preexec_fn=_die_with_parent))  # noqa: PLW1509 (this script starts no threads)
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def run_pytest(command: list[str]) -> int:
    """pytest's exit code. Interrupted here (Ctrl-C, SIGTERM, an error), pytest gets one SIGINT and its
    teardown TEARDOWN_GRACE_S to stop what the tests started; then (or at a second Ctrl-C) its process group
    is killed."""
    proc = subprocess.Popen(command, cwd=ROOT, start_new_session=True)
    try:
        return proc.wait()
    except BaseException:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=TEARDOWN_GRACE_S)
            except BaseException:  # its teardown hangs, or the user insists
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        raise


def one_round(number: int, python: str, workers: int, busy: int, scratch: Path) -> Round:
    junit = scratch / f"round-{number}.xml"
    load_before = [round(x, 2) for x in os.getloadavg()]
    with busy_loops(busy):
        started = time.monotonic()
        code = run_pytest(pytest_command(python, workers, junit))
        wall = time.monotonic() - started
        load_after = [round(x, 2) for x in os.getloadavg()]
    results = read_junit(junit.read_text(encoding="utf-8")) if junit.exists() else None
    failures = [{"nodeid": r.nodeid, "outcome": r.outcome, "first_line": r.first_line}
                for r in results or [] if r.outcome in ("failed", "error")]
    return Round(number, code, outcome_counts(results) if results is not None else None, round(wall, 1),
                 load_before, load_after, failures)


def pytest_command(python: str, workers: int, junit: Path) -> list[str]:
    return [python, "-m", "pytest", "-q", "-n", str(workers), "--dist", "loadgroup", "-p", "no:cacheprovider",
            f"--junitxml={junit}", *TIERS_UNDER_STRESS]


def _git(*args: str) -> str:
    done = subprocess.run(["git", "--no-optional-locks", *args], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    return done.stdout.strip()


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM ends a stress run as Ctrl-C does: through every clean-up


def main() -> int:
    ap = argparse.ArgumentParser(prog="scripts/stress.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"), help="the venv's Python")
    args = ap.parse_args()
    if args.rounds < 1 or args.workers < 1:
        ap.error("--rounds and --workers are at least 1")
    signal.signal(signal.SIGTERM, _terminated)
    busy = os.cpu_count() or 1
    commit = _git("rev-parse", "--short", "HEAD") or "?"
    if _git("status", "--porcelain", "--untracked-files=no"):
        commit += " + uncommitted changes"
    shown = " ".join(pytest_command("python", args.workers, Path("<junit.xml>")))
    stress = Stress(args.rounds, args.workers, busy, commit, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    shown)
    RESULTS.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix="tfcluster-stress-") as scratch:
            for number in range(1, args.rounds + 1):
                done = one_round(number, args.python, args.workers, busy, Path(scratch))
                stress.rounds.append(done)
                write_record(stress, RESULTS)
                print(f"stress round {number}/{args.rounds}: {done.result()} in {done.wall_s:.0f} s", flush=True)
    except KeyboardInterrupt:
        print(f"stress: interrupted after {len(stress.rounds)} of {args.rounds} rounds", file=sys.stderr)
        return 1
    print(f"stress: {verdict(stress.rounds)} (benchmarks/results/stress.md)", flush=True)
    return 0 if all(r.green for r in stress.rounds) else 1


if __name__ == "__main__":
    sys.exit(main())
