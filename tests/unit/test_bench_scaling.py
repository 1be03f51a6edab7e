"""The PS-bandwidth scaling model: the ceiling per mode from the plan's shapes and placement, the PS count
that lifts it, and `tfcluster plan` printing the same advice."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.bench.scaling import advise, nic_capacity_Bps, ps_ceiling
from tests.plans import tiny_plan

REPO = Path(__file__).resolve().parents[2]
WIDE = {"model": "wide", "model_args": {"params": 1_000_000, "shards": 4, "classes": 10}}
MODEL_BYTES = 4 * 1_000_000 + 4 * 10  # four [25000, 10] float32 shards and a bias
WORKERS2 = (("ps",), ("worker",), ("worker",))


def test_between_graph_each_worker_moves_every_variable_twice_per_step() -> None:
    capacity = nic_capacity_Bps(10.0)
    assert capacity == pytest.approx(2.5e9)  # 10 Gb/s each way, in + out together
    c = ps_ceiling(tiny_plan(WORKERS2, training=WIDE), capacity)
    assert c is not None
    assert c.bytes_on_ps == {"ps:0": MODEL_BYTES + 8}  # and the global step
    assert c.transfers_per_step == 4  # 2 workers x (pull + push)
    assert c.steps_per_s_per_worker == pytest.approx(capacity / (4 * (MODEL_BYTES + 8)))


def test_in_graph_pulls_per_tower_and_pushes_once() -> None:
    c = ps_ceiling(tiny_plan(WORKERS2, mode="in-graph", training=WIDE), 1e9)
    assert c is not None
    assert c.transfers_per_step == 3
    assert c.steps_per_s_per_worker == pytest.approx(1e9 / (3 * (MODEL_BYTES + 8)))


def test_no_ceiling_without_a_ps_or_a_known_size() -> None:
    assert ps_ceiling(tiny_plan((("worker",), ("worker",)), mode="multi-worker-mirrored", training=WIDE), 1e9) is None
    assert ps_ceiling(tiny_plan(WORKERS2, training={"command": "python train.py"}), 1e9) is None


def test_more_ps_tasks_lift_the_ceiling_until_the_largest_variable_caps_it() -> None:
    plan = tiny_plan(WORKERS2, training=WIDE)
    one = ps_ceiling(plan, 1e9)
    two = ps_ceiling(plan, 1e9, ps_count=2)
    assert one is not None and two is not None
    assert two.steps_per_s_per_worker == pytest.approx(2 * one.steps_per_s_per_worker, rel=0.01)
    advice = advise(plan, 1e9, wanted_steps_per_s=1.5 * one.steps_per_s_per_worker)
    assert advice is not None and advice.bound and advice.ps_needed == 2
    assert "2 PS tasks" in "\n".join(advice.lines())
    capped = advise(plan, 1e9, wanted_steps_per_s=100 * one.steps_per_s_per_worker)
    assert capped is not None and capped.ps_needed is None
    assert capped.best.steps_per_s_per_worker == pytest.approx(1e9 / (4 * 1_000_000), rel=0.01)  # one shard
    assert "the largest variable alone caps it" in "\n".join(capped.lines())
    assert advise(plan, 1e9, wanted_steps_per_s=0.5 * one.steps_per_s_per_worker).bound is False  # type: ignore[union-attr]


def test_plan_command_prints_the_ceiling_and_its_json(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text("""
[cluster]
name = "wide"
[[hosts]]
name = "p"
address = "127.0.0.2"
roles = ["ps"]
transport = "local"
[[hosts]]
name = "w"
address = "127.0.0.3"
roles = ["worker"]
workers = 2
transport = "local"
[training]
model = "wide"
model_args = {params = 20000000}
""")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "200", "NO_COLOR": "1"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tfcluster", "plan", str(hosts), *args], check=False, cwd=REPO,
                              capture_output=True, text=True, timeout=60, env=env)

    text = run("--nic-gbps", "10", "--steps-per-sec", "20")
    assert text.returncode == 0, text.stderr
    # 80 MB on one PS, 2 workers x 2 per step, 2.5 GB/s in + out: 7.8 steps/s per worker
    assert "PS ceiling (between-graph, wide): ps:0 holds 80.0 MB" in text.stdout
    assert "at most 7.81 steps/s per worker" in text.stdout
    assert "for 20 steps/s per worker: 4 PS tasks (ceiling 31.2 steps/s)" in text.stdout  # 3 PS: one holds 2 shards
    data = json.loads(run("--json", "--nic-gbps", "1").stdout)["ps_ceiling"]
    assert data["nic_gbps"] == 1 and data["bound"] is True
    assert data["ceiling"]["steps_per_s_per_worker"] == pytest.approx(2 * 1e9 / 8 / (4 * (80_000_040 + 8)))
