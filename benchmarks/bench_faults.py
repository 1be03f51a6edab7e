"""The fault suite as a results table: `make faults` (or `python -m benchmarks faults`).

Runs `pytest tests/faults` with $TFCLUSTER_FAULTS_RESULTS pointing at a fresh JSON-lines file (each fault
test appends one line: its figures and pass/FAIL, tests/faults/measure.py), then writes
benchmarks/results/faults.json (every line, pytest's outcome and wall time, the machine's load before and
after) and faults.md: one row per fault with steps lost, seconds to recover, processes left and the
result. A fault whose run is shared with others (one cluster start for several faults) gets the
processes-left figure of its run's end. Then the mode x fault table (testkit/fault_table.py): the steps
each replication mode lost on each fault, one row per mode. The figures are timings of a shared 2-core machine: the load is
recorded beside them, never hidden.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import common
from testkit.fault_table import mode_table

NAME = "faults"
COLUMNS = ("fault", "steps lost", "recover s", "processes left", "other figures", "result")
SHOWN = {"fault", "run", "result", "t", "steps_lost", "recover_s", "processes_left"}


def run_suite(results: Path, extra: list[str]) -> tuple[int, float, str]:
    env = {**os.environ, "TFCLUSTER_FAULTS_RESULTS": str(results)}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/faults", *extra],
                          cwd=common.ROOT, env=env, capture_output=True, text=True, check=False)
    tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
    return proc.returncode, time.monotonic() - started, tail


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def with_run_ends(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each fault of a shared run gets the processes left at its run's end (the line that measured it)."""
    left = {line["run"]: line["processes_left"] for line in lines if "processes_left" in line}
    return [{**line, "processes_left": line.get("processes_left", left.get(line["run"]))} for line in lines]


def cell(value: Any) -> str:
    return "-" if value is None else str(value)


def markdown(lines: list[dict[str, Any]], code: int, seconds: float, tail: str) -> str:
    out = ["# Fault suite (tests/faults)", "",
           "Real sshd on loopback machines, real TensorFlow (`mlp`; between-graph: ps:0 on m0, worker:0 = chief on "
           "m1, worker:1 on m2; the other modes: tests/faults/test_mode_faults.py). Steps lost = highest global step before the fault minus the lowest reported "
           "after it; recover s = fault (or its end) to the victim, or its replacement, stepping again (or the "
           "run judged right); processes left = processes of the run on any host once it ended.", "",
           "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for line in lines:
        other = ", ".join(f"{k}={v}" for k, v in line.items() if k not in SHOWN)
        out.append("| " + " | ".join([line["fault"], cell(line.get("steps_lost")), cell(line.get("recover_s")),
                                      cell(line.get("processes_left")), other.replace("|", "/"),
                                      line["result"].replace("|", "/")]) + " |")
    out += ["", "## Steps lost, per mode and fault", "",
            "The global steps each replication mode lost on each fault (the README's fault table states the "
            "rule each cell is tested against). Where the run fell back to a checkpoint the cell names the "
            "step at the fault and the checkpoint's step: the loss is bounded by `checkpoint_every_steps` / "
            "`checkpoint_every_secs`.", "", *mode_table(lines)]
    verdict = "passed" if code == 0 else f"FAILED (pytest exit {code})"
    out += ["", f"Suite {verdict} in {seconds:.0f} s wall time.", "", "```", tail, "```"]
    return "\n".join(out) + "\n"


def main() -> int:
    extra = sys.argv[1:]
    before = common.load_now()
    with tempfile.TemporaryDirectory(prefix="tfcluster-faults-") as tmp:
        path = Path(tmp) / "faults.jsonl"
        code, seconds, tail = run_suite(path, extra)
        lines = with_run_ends(read_lines(path))
    after = common.load_now()
    cpus = common.cores()
    busy = "a loaded machine (other work running)" if before[0] > cpus else "a machine at most at its core count"
    data = {"pytest_exit": code, "wall_s": round(seconds, 1), "faults": lines, "measured": common.now_utc(),
            "machine_load": {"cpus": cpus, "load_before": before, "load_after": after}}
    md = markdown(lines, code, seconds, tail) + (
        f"\nMachine load (1/5/15 min) on {cpus} cores: before {before}, after {after}: {busy}; "
        f"measured {data['measured']}.\n")
    json_path, md_path = common.write_results(NAME, data, md)
    print(md)
    print(f"wrote {json_path} and {md_path}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
