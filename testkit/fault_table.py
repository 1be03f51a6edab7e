"""The fault suite's mode x fault table: what each replication mode loses (global steps) on each fault.

The fault tests (tests/faults) tag each measured fault with its run's `mode` and its `column` here;
benchmarks/bench_faults.py (`make faults`) turns the tagged lines into this table in
benchmarks/results/faults.md, one row per mode. A cell is the steps lost as measured (highest global step
before the fault minus the lowest reported after it), with the checkpoint the run could fall back to
when there was one, "FAIL" when the test failed, "n/a" where the mode has no such task (no ps in
multi-worker-mirrored) and "-" where the suite measured nothing.
"""

from __future__ import annotations

from typing import Any

WORKER_KILL, CHIEF_TERM, CHIEF_KILL, PS_KILL = ("SIGKILL a worker", "SIGTERM the chief", "SIGKILL the chief",
                                                "SIGKILL a ps")
MODE_COLUMNS = (WORKER_KILL, CHIEF_TERM, CHIEF_KILL, PS_KILL)
MODES = ("between-graph", "in-graph", "multi-worker-mirrored", "parameter-server-strategy")
NO_PS = {"multi-worker-mirrored"}


def _cell(line: dict[str, Any] | None, mode: str, column: str) -> str:
    if line is None:
        return "n/a" if column == PS_KILL and mode in NO_PS else "-"
    if line.get("result") != "pass":
        return "FAIL"
    lost = line.get("steps_lost")
    text = "-" if lost is None else str(lost)
    if line.get("checkpoint_step") is not None and line.get("step_at_fault") is not None:
        text += f" (step {line['step_at_fault']}, checkpoint {line['checkpoint_step']})"
    return text


def mode_table(lines: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: one row per mode, one column per fault (the last measurement of each wins)."""
    cells = {(line.get("mode"), line.get("column")): line for line in lines if line.get("column")}
    out = ["| mode | " + " | ".join(MODE_COLUMNS) + " |", "|" + "---|" * (len(MODE_COLUMNS) + 1)]
    for mode in MODES:
        out.append(f"| {mode} | " + " | ".join(_cell(cells.get((mode, c)), mode, c) for c in MODE_COLUMNS) + " |")
    return out
