"""The straggler switch, qualitatively, on real local clusters (`slowdown = {"worker:1" = 4.0}`, 2 workers).

Timing-robust, not timing-precise (the exact figures live in benchmarks/bench_straggler.py): the margins
are wide enough for a loaded 2-core machine. In-graph, one slow tower must slow the whole synchronous
step (>= 2x, expected ~4x); between-graph, the fast worker must keep going at its own pace, far ahead of
the slow one (>= 2x its step rate, expected ~4x or more).
"""

from __future__ import annotations

from pathlib import Path
from statistics import median
from typing import Any

import pytest

from testkit.local_cluster import LocalCluster, local_plan, running_cluster
from tests import requires

pytestmark = pytest.mark.integration
requires.tensorflow()

SKIP = 2  # the first progress events include session start-up


def plan_for(mode: str, steps: int, straggler: bool) -> Any:
    training: dict[str, Any] = {"model": "mlp", "batch_size": 16, "steps": steps, "input": "worker",
                                "progress_interval": 0.5}
    if straggler:
        training["slowdown"] = {"worker:1": 4.0}
    return local_plan(mode, ps=1, workers=2, training=training)


def finished(cluster: LocalCluster, timeout: float = 150.0) -> LocalCluster:
    codes = cluster.wait(timeout)
    assert all(rc == 0 for rc in codes.values()), f"{codes}\n{cluster.logs_tail()}"
    return cluster


def rates(events: list[dict[str, Any]]) -> list[float]:
    return [e["steps"] / e["interval_s"] for e in events[SKIP:] if e["steps"] and e["interval_s"] > 0]


def test_in_graph_straggler_slows_every_step(tmp_path: Path) -> None:
    # Both clusters run at once: start-up costs overlap, and machine load hits both alike. The baseline
    # runs more steps (it is ~4x faster) so that both leave several steady-state progress events.
    with running_cluster(plan_for("in-graph", 200, False), tmp_path / "base") as base_cluster, \
            running_cluster(plan_for("in-graph", 80, True), tmp_path / "slow") as slow_cluster:
        base_all = finished(base_cluster).events("chief", 0)
        slow_all = finished(slow_cluster).events("chief", 0)
    base, slow = base_all[SKIP:], slow_all[SKIP:]
    assert base and slow
    # (input = "worker" with one ps task, also checked here: no client input crossed the network)
    for events, steps in ((base_all, 200), (slow_all, 80)):
        assert events[-1]["global_step"] == steps
        assert all("input_bytes" not in e and set(e["ps_bytes"]) <= {"ps-0"} for e in events)
    base_step = median(e["step_s"] for e in base)
    slow_step = median(e["step_s"] for e in slow)
    assert slow_step >= 2.0 * base_step, (base_step, slow_step)
    # the sleep ran on worker 1 only; the fast tower still computes quickly, then waits for it
    assert all(e["towers"]["worker-0"]["delay_s"] == 0.0 for e in slow)
    assert median(e["towers"]["worker-1"]["delay_s"] for e in slow) > 0.0
    assert median(e["towers"]["worker-0"]["compute_s"] for e in slow) < 0.5 * slow_step


def test_between_graph_fast_worker_outpaces_the_straggler(tmp_path: Path) -> None:
    with running_cluster(plan_for("between-graph", 1500, True), tmp_path / "bg") as cluster:
        finished(cluster)
    fast, slow = rates(cluster.events("worker", 0)), rates(cluster.events("worker", 1))
    assert fast and slow, cluster.logs_tail()
    assert median(fast) >= 2.0 * median(slow), (median(fast), median(slow))
