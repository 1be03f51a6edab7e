"""The bench's cells and the cluster each one plans, through the product's own planner (no machines)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from orchestrator.bench.cells import ENDLESS_STEPS, Cell, cell_plan, cells, listed_workers, with_workers
from orchestrator.bench.spec import BenchSpec, Kill, Straggler, TaskRef
from orchestrator.config.schema import Config
from orchestrator.errors import UsageError


def config(hosts: Sequence[dict[str, object]], training: dict[str, object] | None = None) -> Config:
    return Config.model_validate({
        "cluster": {"name": "bench", "base_port": 23000},
        "hosts": [{"address": f"127.0.0.{i + 2}", "transport": "local", "workdir": f"/tmp/b{i}", **h}
                  for i, h in enumerate(hosts)],
        "training": training or {"model": "mlp"},
    })


FOUR = config([{"name": "p", "roles": ["ps"]}, {"name": "a", "roles": ["worker"], "workers": 3},
               {"name": "b", "roles": ["worker"]}])


def test_worker_counts_default_to_powers_of_two_and_all() -> None:
    spec = BenchSpec("hosts.toml", modes=("between-graph",))
    assert listed_workers(FOUR) == 4
    assert [c.workers for c in cells(spec, FOUR)] == [1, 2, 4]
    with pytest.raises(UsageError, match="lists 4 worker task"):
        cells(BenchSpec("hosts.toml", workers=(2, 8)), FOUR)


def test_subsets_take_the_first_workers_and_drop_empty_hosts() -> None:
    two = with_workers(FOUR, 2)
    assert [(h.name, h.roles, h.workers) for h in two.hosts] == [("p", ["ps"], None), ("a", ["worker"], 2)]
    four = with_workers(FOUR, 4)
    assert [h.name for h in four.hosts] == ["p", "a", "b"]


def test_variants_exist_only_where_the_task_does_and_repeats_interleave() -> None:
    spec = BenchSpec("hosts.toml", modes=("between-graph", "in-graph"), workers=(1, 2), repeat=2,
                     straggler=Straggler(TaskRef("worker", 1), 4.0), kill=Kill(TaskRef("worker", 1), 3.0),
                     seconds=10.0)
    keys = [c.key for c in cells(spec, FOUR)]
    assert keys[:6] == ["between-graph/w1/baseline#1", "between-graph/w2/baseline#1", "between-graph/w2/straggler#1",
                        "between-graph/w2/kill#1", "in-graph/w1/baseline#1", "in-graph/w2/baseline#1"]
    assert keys.index("between-graph/w1/baseline#2") > keys.index("in-graph/w2/kill#1")  # repeat by repeat
    assert len(keys) == 2 * 2 * 4


def test_a_cell_plan_is_the_real_plan_with_the_bench_settings() -> None:
    spec = BenchSpec("hosts.toml", straggler=Straggler(TaskRef("worker", 1), 4.0), pace=5.0, seconds=10.0,
                     model="wide", model_args={"params": 200_000})
    plan = cell_plan(spec, FOUR, Cell("between-graph", 2, "straggler", 0))
    assert [t.name for t in plan.tasks] == ["ps:0", "worker:0", "worker:1"]
    assert plan.training.slowdown == {"worker:0": 5.0, "worker:1": 20.0}  # paced, the straggler 4x slower
    assert plan.training.steps == ENDLESS_STEPS  # timed in seconds: the bench stops it
    assert plan.training.model == "wide" and plan.training.model_args == {"params": 200_000}
    base = cell_plan(spec, FOUR, Cell("between-graph", 2, "baseline", 0))
    assert base.training.slowdown == {"worker:0": 5.0, "worker:1": 5.0}


def test_sync_paths_start_beside_the_hosts_file_whatever_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    with_sync = config([{"name": "p", "roles": ["ps"]}, {"name": "a", "roles": ["worker"]}],
                       {"command": "sleep 1", "sync": ["train.py"]})
    plan = cell_plan(BenchSpec(str(tmp_path / "hosts.toml")), with_sync, Cell("between-graph", 1, "baseline", 0))
    assert plan.training.sync == ["train.py"]


def test_mirrored_cells_drop_the_parameter_servers() -> None:
    spec = BenchSpec("hosts.toml", steps=50)
    plan = cell_plan(spec, FOUR, Cell("multi-worker-mirrored", 4, "baseline", 0))
    assert [t.job for t in plan.tasks] == ["worker"] * 4
    assert [h.name for h in plan.hosts] == ["a", "b"]
    assert plan.training.steps == 50


def test_in_graph_and_ps_strategy_get_their_client_chief() -> None:
    spec = BenchSpec("hosts.toml")
    for mode in ("in-graph", "parameter-server-strategy"):
        plan = cell_plan(spec, FOUR, Cell(mode, 1, "baseline", 0))  # type: ignore[arg-type]
        assert sorted(t.name for t in plan.tasks) == ["chief:0", "ps:0", "worker:0"], mode


def test_gpu_hosts_keep_their_gpus_per_task_in_every_mode() -> None:
    """A cell of N workers is N tasks in every mode: multi-worker-mirrored's own default (all of a host's GPUs
    in one task) would make it fewer."""
    gpus = config([{"name": "p", "roles": ["ps"]}, {"name": "a", "roles": ["worker"], "gpus": [0, 1, 2, 3]},
                   {"name": "b", "roles": ["worker"], "gpus": [0, 1, 2, 3], "gpus_per_task": 2}])
    assert listed_workers(gpus) == 4 + 2
    spec = BenchSpec("hosts.toml", steps=50)
    mirrored = cell_plan(spec, gpus, Cell("multi-worker-mirrored", 4, "baseline", 0))
    assert [(t.host, t.gpus) for t in mirrored.tasks] == [("a", (0,)), ("a", (1,)), ("a", (2,)), ("a", (3,))]
    assert [(h.gpus, h.gpus_per_task) for h in with_workers(gpus, 5).hosts] == [
        (None, None), ([0, 1, 2, 3], 1), ([0, 1], 2)]
