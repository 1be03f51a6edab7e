"""The mode x fault table `make faults` writes (testkit/fault_table.py through benchmarks/bench_faults.py),
from fault lines shaped as tests/faults/measure.py records them."""

from __future__ import annotations

from benchmarks.bench_faults import markdown
from testkit.fault_table import CHIEF_KILL, CHIEF_TERM, PS_KILL, WORKER_KILL, mode_table

LINES = [
    {"fault": "SIGKILL worker:1", "run": "between-graph", "result": "pass", "mode": "between-graph",
     "column": WORKER_KILL, "steps_lost": 0, "recover_s": 7.3},
    {"fault": "SIGKILL ps:0", "run": "between-graph", "result": "pass", "mode": "between-graph", "column": PS_KILL,
     "steps_lost": 211, "step_at_fault": 3007, "checkpoint_step": 2795},
    {"fault": "SIGTERM chief:0", "run": "parameter-server-strategy", "result": "FAIL: timed out",
     "mode": "parameter-server-strategy", "column": CHIEF_TERM},
    {"fault": "SIGKILL chief:0", "run": "parameter-server-strategy", "result": "pass",
     "mode": "parameter-server-strategy", "column": CHIEF_KILL, "steps_lost": 169, "step_at_fault": 1081,
     "checkpoint_step": 907},
    {"fault": "stop", "run": "in-graph", "result": "pass", "processes_left": 0},  # no column: not in the table
]


def test_one_row_per_mode_one_column_per_fault() -> None:
    table = mode_table(LINES)
    assert table[0] == "| mode | SIGKILL a worker | SIGTERM the chief | SIGKILL the chief | SIGKILL a ps |"
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table[2:]}
    assert list(rows) == ["between-graph", "in-graph", "multi-worker-mirrored", "parameter-server-strategy"]
    assert rows["between-graph"] == "| between-graph | 0 | - | - | 211 (step 3007, checkpoint 2795) |"
    assert rows["multi-worker-mirrored"].endswith("| - | - | - | n/a |")  # no ps in that mode
    assert rows["parameter-server-strategy"] == ("| parameter-server-strategy | - | FAIL | "
                                                 "169 (step 1081, checkpoint 907) | - |")


def test_faults_md_carries_the_mode_table() -> None:
    md = markdown(LINES, 0, 12.0, "15 passed")
    assert "## Steps lost, per mode and fault" in md and "| between-graph | 0 | - | - | 211" in md
