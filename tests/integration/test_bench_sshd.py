"""`tfcluster bench` for real: the CLI over a real sshd per loopback machine, real TensorFlow clusters
started, measured and stopped cell by cell through the product's lifecycle.

Short cells (seconds of measurement): the figures are checked for plausibility and for the straggler's
qualitative effect with wide margins (a loaded 2-core machine); the exact figures are the benchmark's
(benchmarks/bench_modes.py). Every test ends with no process of any of its runs left.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from testkit.sshd import Machines
from tests import requires
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import (
    cli,
    cli_process,
    records,
    run_processes,
)

pytestmark = pytest.mark.integration
requires.tensorflow()

TRAINING = {"model": "mlp", "batch_size": 32, "progress_interval": 1.0}


def no_process_left(state: Path) -> None:
    for record in records(state):
        assert run_processes(record["run_id"]) == [], record["run_id"]


def cells_by_key(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{c['cell']['mode']}/w{c['cell']['workers']}/{c['cell']['variant']}": c for c in report["cells"]}


@pytest.mark.parametrize("mode", ["between-graph", "in-graph"])
def test_bench_a_mode_with_a_straggler(mode: str, sshd_machines: Callable[[int], Machines], tmp_path: Path,
                                       state_dir: Path) -> None:
    """One mode per test, its baseline and straggler cells (two cluster starts): the two modes run side by side
    on the suite's workers. The figures of several modes in one report are tests/unit/test_bench_figures.py's."""
    machines = sshd_machines(3)
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps"], ["worker"], ["worker"]], training=TRAINING)
    out = tmp_path / "report"
    result = cli(state_dir, "bench", str(hosts), "--modes", mode, "--workers", "2", "--seconds", "4", "--warmup", "1",
                 "--straggler", "worker:1=4", "--out", str(out), timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    no_process_left(state_dir)
    report = json.loads((out / "bench.json").read_text())
    assert report["schema"] == "tfcluster-bench" and report["version"] == 1
    cells = cells_by_key(report)
    baseline, straggler = f"{mode}/w2/baseline", f"{mode}/w2/straggler"
    assert set(cells) == {baseline, straggler}
    assert len({c["run_id"] for c in cells.values()}) == 2
    for key, c in cells.items():
        assert c["status"] == "ok" and c["stopped_clean"] is True, key
        f = c["figures"]
        assert 3.0 <= f["window_s"] <= 15.0, key
        assert 50 <= f["examples_per_s"] <= 1_000_000, key  # batch 32: a few to thousands of steps/s
        assert 1 <= f["updates_per_s"] <= 30_000, key
        assert set(f["per_worker_steps_per_s"]) == {"worker:0", "worker:1"}, key
        ps = f["ps"]["ps:0"]
        assert 0.7 <= ps["measured_over_accounted"] <= 1.5, (key, ps)  # mlp: small tensors, some gRPC overhead
        assert c["samples"]["progress"] and c["samples"]["hosts"], key  # the raw samples are kept
        assert c["ceiling"]["transfers_per_step"] == (4 if mode == "between-graph" else 3)
        if mode == "in-graph":
            assert 1 <= f["client_cpu_pct"] <= 200, key  # the client's own CPU
    rate = {k: c["figures"]["per_worker_steps_per_s"] for k, c in cells.items()}
    if mode == "in-graph":
        # synchronous: one slow tower (4x) slows every tower (expected ~1/4)
        assert rate[straggler]["worker:0"] <= 0.6 * rate[baseline]["worker:0"]
    else:
        # the fast worker keeps (roughly) its pace, far ahead of the straggler
        fast, slow = rate[straggler]["worker:0"], rate[straggler]["worker:1"]
        assert fast >= 0.6 * rate[baseline]["worker:0"]
        assert fast >= 2.0 * slow
    # the terminal: the table, a line per straggler effect, the scaling and straggler bar charts
    assert "tfcluster bench" in result.stdout and mode in result.stdout
    assert f"straggler worker:1 ×4, {mode} (2 workers)" in result.stdout
    assert "Does adding workers pay?" in result.stdout and "Does a slow worker hold the others back?" in result.stdout
    # the figures: PNG files, and their series in figures.json
    for name in ("scaling", "straggler", "ps", "loss"):
        assert (out / f"{name}.png").read_bytes()[:4] == b"\x89PNG", name
    figures = json.loads((out / "figures.json").read_text())
    assert mode in {line["label"] for line in figures["scaling"]["axes"][1]["lines"]}
    bars = figures["straggler"]["axes"][0]
    assert "straggler worker:1 ×4" in figures["straggler"]["title"]
    assert [t.split("\n")[0] for t in bars["yticklabels"]] == [mode]
    assert len(bars["bars"][0]["values"]) == 1  # one bar per mode
    assert {ax["title"] for ax in figures["ps"]["axes"]} == {mode}
    assert f"{mode} (2 workers)" in {line["label"] for line in figures["loss"]["axes"][0]["lines"]}


def test_a_failed_cell_is_recorded_and_ctrl_c_keeps_the_finished_cells(
        sshd_machines: Callable[[int], Machines], tmp_path: Path, state_dir: Path) -> None:
    """No ps in this hosts.toml: the between-graph cells cannot be planned (recorded with the planner's
    error); the multi-worker-mirrored cells run, and Ctrl-C in the second stops its cluster."""
    machines = sshd_machines(2)
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["worker"], ["worker"]], mode="multi-worker-mirrored",
                                training=TRAINING)
    out = tmp_path / "report"
    with cli_process(state_dir, "bench", str(hosts), "--modes", "between-graph,multi-worker-mirrored",
                     "--workers", "1,2", "--seconds", "3", "--warmup", "1", "--out", str(out)) as proc:
        # the second mirrored cell's run: started (its record says so once every task runs)
        wait_for(lambda: len(records(state_dir)) >= 2 and records(state_dir)[1]["status"] == "started", 180,
                 "the second cell's cluster")
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout=90)
        assert proc.returncode == 130, proc.stderr.read() if proc.stderr else ""
        no_process_left(state_dir)
    report = json.loads((out / "bench.json").read_text())
    assert report["interrupted"] is True
    cells = cells_by_key(report)
    assert list(cells) == ["between-graph/w1/baseline", "between-graph/w2/baseline",
                           "multi-worker-mirrored/w1/baseline", "multi-worker-mirrored/w2/baseline"]
    for key in ("between-graph/w1/baseline", "between-graph/w2/baseline"):
        assert cells[key]["status"] == "failed" and "between-graph mode needs a parameter server" in cells[key]["error"]
    assert cells["multi-worker-mirrored/w1/baseline"]["status"] == "ok"
    assert cells["multi-worker-mirrored/w1/baseline"]["figures"]["examples_per_s"] > 0
    assert cells["multi-worker-mirrored/w2/baseline"]["status"] == "interrupted"
    assert cells["multi-worker-mirrored/w2/baseline"]["stopped_clean"] is True
