"""`tfcluster bench --resize` for real: the CLI over a real sshd per loopback machine, a between-graph
(asynchronous: the live mode) cluster of 1 worker grown to 2 through the real resize, then shrunk back.

One mode, short phases: the figures are checked for presence and sanity, the exact ones are the
benchmark's (benchmarks/bench_resize.py). The test ends with no process of any of its runs left.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from testkit.sshd import Machines
from tests import requires
from tests.integration.lifecycle_helpers import cli, records, run_processes

pytestmark = pytest.mark.integration
requires.tensorflow()

TRAINING = {"model": "mlp", "batch_size": 32, "progress_interval": 1.0}


@pytest.mark.timeout(480)
def test_a_worker_joins_and_leaves_a_between_graph_run(sshd_machines: Callable[[int], Machines], tmp_path: Path,
                                                       state_dir: Path) -> None:
    machines = sshd_machines(3)
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps"], ["worker"], ["worker"]], training=TRAINING)
    out = tmp_path / "report"
    result = cli(state_dir, "bench", str(hosts), "--modes", "between-graph", "--workers", "1", "--seconds", "2",
                 "--warmup", "1", "--resize-at", "3s", "--out", str(out), timeout=420)
    assert result.returncode == 0, result.stdout + result.stderr
    for record in records(state_dir):
        assert run_processes(record["run_id"]) == [], record["run_id"]
    report = json.loads((out / "bench.json").read_text())
    cells = {c["cell"]["variant"]: c for c in report["cells"]}
    assert set(cells) == {"baseline", "resize"}
    cell = cells["resize"]
    assert cell["status"] == "ok" and cell["stopped_clean"] is True, cell["error"]
    resize = cell["figures"]["resize"]
    assert resize["workers"] == 1 and resize["joined"] == ["worker:1"] and resize["reference"] == "worker:0"
    join, leave = resize["events"]
    assert (join["event"], leave["event"]) == ("join", "leave")
    assert join["tasks"] == leave["tasks"] == ["worker:1"] and join["hosts"] == leave["hosts"] == ["m2"]
    for e in (join, leave):
        assert e["restarted"] == [] and e["steps_lost"] == 0 and e["reference_restarted"] is False, e  # live
        assert e["resumed"] is True, e
        assert 0.5 <= e["stall_s"] <= 60, e  # about one progress interval; a loaded machine stretches it
        assert 0 < e["took_s"] <= 180 and e["took_s"] <= e["stepping_after_s"], e
    # the joined worker stepped: its progress is in the samples, on its own host's clock mapped to ours
    joined = [p for p in cell["samples"]["progress"] if p[1] == "worker:1"]
    assert joined and max(p[2] for p in joined) > 0
    rates = resize["examples_per_s"]
    assert all(rates[k] is not None and rates[k] > 0 for k in ("before_join", "between", "after_leave")), rates
    # the table, the plot, and a redraw of the report reads the figures back
    assert "a worker joins, then leaves" in result.stdout and "join worker:1" in result.stdout
    assert (out / "resize.png").read_bytes()[:4] == b"\x89PNG"
    figures = json.loads((out / "figures.json").read_text())
    assert figures["resize"]["axes"][0]["title"].startswith("between-graph")
    redrawn = cli(state_dir, "bench", "--report", str(out / "bench.json"), "--out", str(tmp_path / "redrawn"))
    assert redrawn.returncode == 0 and "leave worker:1" in redrawn.stdout, redrawn.stderr
