"""The device strings the between-graph graph requests, for a plan with GPUs (CI has none: the graph is
only built, never run, so no GPU is needed). Imports TensorFlow lazily; skipped where it is missing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.schema import Config
from orchestrator.plan.from_file import plan_config
from orchestrator.plan.model import ClusterPlan
from tests import requires
from training.models.sizes import mlp_shapes, wide_shapes

tf = requires.tensorflow()
v1 = tf.compat.v1


def gpu_plan() -> ClusterPlan:
    return plan_config(Config.model_validate({
        "cluster": {"mode": "between-graph", "base_port": 31000},
        "hosts": [
            {"name": "ps-a", "address": "10.0.0.21", "roles": ["ps"]},
            {"name": "ps-b", "address": "10.0.0.22", "roles": ["ps"]},
            {"name": "gpu-a", "address": "10.0.0.11", "roles": ["worker"], "gpus": [0, 3]},
        ],
    }))


def build(model_name: str, args: dict[str, Any], device: str, spec: dict[str, list[str]]) -> tuple[Any, Any, Any]:
    from training.cluster.devices import variable_setter
    from training.models import get_model

    graph = tf.Graph()
    with graph.as_default():
        setter, strategy = variable_setter(spec, device)
        with v1.device(setter):
            global_step = v1.train.get_or_create_global_step()
            model = get_model(model_name, args)
            features, labels = model.input_fn(8, 0)
            loss = model.loss(features, labels)
            v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=global_step)
    return graph, loss, strategy


def ps_bytes(graph: Any) -> dict[str, int]:
    from training.cluster.devices import bytes_per_ps, placed_variables

    return bytes_per_ps(placed_variables(graph))


def test_plan_gives_each_gpu_worker_its_own_gpu() -> None:
    plan = gpu_plan()
    w1 = plan.task("worker", 1)
    assert w1.device == "/job:worker/task:1/device:GPU:0"
    assert w1.env["CUDA_VISIBLE_DEVICES"] == "3"  # the task sees only its GPU, as its GPU:0
    assert all(plan.task("ps", i).env["CUDA_VISIBLE_DEVICES"] == "" for i in range(2))


def test_compute_requests_the_workers_gpu_and_variables_the_ps_tasks() -> None:
    plan = gpu_plan()
    graph, loss, _ = build("mlp", {}, plan.task("worker", 1).device, plan.cluster_spec)
    assert loss.device == "/job:worker/task:1/device:GPU:0"
    matmuls = [op for op in graph.get_operations() if op.type == "MatMul"]
    assert matmuls and all(op.device == "/job:worker/task:1/device:GPU:0" for op in matmuls)
    with graph.as_default():
        variables = v1.global_variables()
    assert {v.device for v in variables} == {"/job:ps/task:0", "/job:ps/task:1"}
    # the gradient updates run where their variable lives (pushed to the PS)
    applies = [op for op in graph.get_operations() if op.type.startswith("ResourceApply")]
    assert applies and all(op.device.startswith("/job:ps/task:") for op in applies)


def test_wide_bytes_are_balanced_across_two_ps() -> None:
    plan = gpu_plan()
    args = {"params": 200_000, "shards": 4}
    graph, _, strategy = build("wide", args, plan.task("worker", 0).device, plan.cluster_spec)
    loads = ps_bytes(graph)
    shard = wide_shapes(args)[0].nbytes
    assert set(loads) == {"ps-0", "ps-1"}
    assert abs(loads["ps-0"] - loads["ps-1"]) <= 64  # two shards each; bias and global step are tiny
    assert sum(loads.values()) == sum(s.nbytes for s in wide_shapes(args)) + 8
    assert loads["ps-0"] >= 2 * shard and loads["ps-1"] >= 2 * shard
    assert strategy.loads == [loads["ps-0"], loads["ps-1"]]


def test_every_variable_goes_to_the_lighter_ps() -> None:
    plan = gpu_plan()
    graph, _, strategy = build("mlp", {"input_dim": 64, "hidden": "256,32"}, plan.task("worker", 0).device,
                               plan.cluster_spec)
    loads = [0, 0]
    for name, ps, nbytes in strategy.placed:
        assert loads[ps] == min(loads), (name, loads)
        loads[ps] += nbytes
    with graph.as_default():
        shapes = {v.op.name: tuple(v.shape.as_list()) for v in v1.trainable_variables()}
    assert shapes == {s.name: s.shape for s in mlp_shapes({"input_dim": 64, "hidden": "256,32"})}


def test_users_build_function_is_placed_by_the_same_setter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_model.py").write_text(
        "import tensorflow as tf\n"
        "def build(features, labels):\n"
        "    w = tf.compat.v1.get_variable('user_w', [32, 10])\n"
        "    logits = tf.matmul(features, w)\n"
        "    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    plan = gpu_plan()
    graph, loss, _ = build("my_model:build", {}, plan.task("worker", 1).device, plan.cluster_spec)
    assert loss.shape.rank == 0  # a per-example loss is averaged
    with graph.as_default():
        (user_w,) = [v for v in v1.trainable_variables() if v.op.name == "user_w"]
    assert user_w.device.startswith("/job:ps/task:")
    assert loss.device == "/job:worker/task:1/device:GPU:0"
    sys.modules.pop("my_model", None)


def test_unknown_model_is_one_clear_error() -> None:
    from training.models import get_model

    with pytest.raises(ValueError, match='unknown model "resnet"'):
        get_model("resnet", {})
    with pytest.raises(ValueError, match="cannot import"):
        get_model("no_such_module_xyz:build", {})


def test_session_configs_soft_placement_filters_and_cpu_only_ps() -> None:
    from training.cluster.devices import session_config

    worker = session_config(device_filters=["/job:ps", "/job:worker/task:1"])
    assert worker.allow_soft_placement
    assert list(worker.device_filters) == ["/job:ps", "/job:worker/task:1"]
    assert session_config(cpu_only=True).device_count["GPU"] == 0


def test_done_queue_contract() -> None:
    from training.cluster.ps import expected_finishers, serving_targets

    spec = {"chief": ["h:1"], "ps": ["h:2", "h:3"], "worker": ["h:4", "h:5"]}
    assert expected_finishers("between-graph", spec) == {"chief:0", "worker:0", "worker:1"}
    assert serving_targets("between-graph", spec) == [("ps", 0), ("ps", 1)]
    assert expected_finishers("in-graph", spec) == {"chief:0"}
    assert serving_targets("in-graph", spec) == [("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1)]


def test_done_queue_is_shared_by_name_per_run_and_placed_on_its_task() -> None:
    """Two runs that reach the same server (a reused port) never share a done queue."""
    from training.cluster.ps import done_queue, run_tag

    graph = tf.Graph()
    with graph.as_default():
        queue = done_queue("run-a", "ps", 1)
        other = done_queue("run-b", "ps", 1)
    assert queue.queue_ref.op.get_attr("shared_name") == f"done_queue_{run_tag('run-a')}_ps1".encode()
    assert queue.queue_ref.op.get_attr("shared_name") != other.queue_ref.op.get_attr("shared_name")
    assert queue.queue_ref.device == "/job:ps/task:1/device:CPU:0"


def test_a_joining_tasks_sessions_carry_the_cluster_and_share_the_ps_state() -> None:
    from training.cluster.devices import session_config

    spec = {"ps": ["h:2"], "worker": ["h:4", "h:5"]}
    config = session_config(device_filters=["/job:ps", "/job:worker/task:1"], cluster=spec)
    assert {j.name: dict(j.tasks) for j in config.cluster_def.job} == {"ps": {0: "h:2"},
                                                                       "worker": {0: "h:4", 1: "h:5"}}
    assert config.experimental.share_session_state_in_clusterspec_propagation
    assert not session_config(device_filters=["/job:ps"]).HasField("cluster_def")  # a run never resized


def test_the_ps_waits_for_the_finishers_of_its_run_file_as_it_is_now(tmp_path: Path) -> None:
    import json
    import os

    from training.cluster.ps import FinisherWatch

    run_file = tmp_path / "run.json"

    def write(spec: dict[str, list[str]] | None, text: str | None = None) -> None:  # replaced, as resize does
        (tmp_path / "new").write_text(text if text is not None else json.dumps({"plan": {"cluster_spec": spec}}))
        os.replace(tmp_path / "new", run_file)

    start = {"ps": ["h:2"], "worker": ["h:4"]}
    write(start)
    watch = FinisherWatch(str(run_file), "between-graph", start)
    assert watch.current() == {"worker:0"}
    write({"ps": ["h:2"], "worker": ["h:4", "h:5"]})  # grown
    assert watch.current() == {"worker:0", "worker:1"}
    write(None, '{"plan": ')  # half written or damaged: the last good set
    assert watch.current() == {"worker:0", "worker:1"}
    write(start)  # shrunk back: worker:1 never sends its token, and is not waited for
    assert watch.current() == {"worker:0"}
