"""The device strings the in-graph graph requests, for a plan with GPUs.

CI has no GPU: the plan *names* GPUs (the fake) and we only build the graph, never run it, so this checks
what the client asks TensorFlow for: towers on /job:worker/task:N/device:GPU:k (one per GPU of each worker),
variables on the PS tasks, the input split, aggregation and update on the client. Builds a real graph;
starts no server.
"""

from __future__ import annotations

from typing import Any

from orchestrator.config.schema import Config
from orchestrator.plan.from_file import plan_config
from tests import requires

tf = requires.tensorflow()

from training.graph.in_graph import CLIENT_DEVICE, build_in_graph, task_of  # noqa: E402
from training.graph.towers import towers_from_plan  # noqa: E402
from training.models import get_model  # noqa: E402


def gpu_plan(**training: Any) -> dict[str, Any]:
    config = Config.model_validate({
        "cluster": {"mode": "in-graph", "base_port": 30000},
        "hosts": [
            {"name": "client", "address": "10.0.0.1", "roles": ["chief"]},
            {"name": "gpu-a", "address": "10.0.0.11", "roles": ["worker"], "gpus": [1]},
            {"name": "gpu-b", "address": "10.0.0.12", "roles": ["worker"], "gpus": [0]},
            {"name": "ps-1", "address": "10.0.0.21", "roles": ["ps"]},
            {"name": "ps-2", "address": "10.0.0.22", "roles": ["ps"]},
        ],
        "training": {"model": "mlp", "batch_size": 16, **training},
    })
    return plan_config(config).to_json()


def build(plan: dict[str, Any]) -> tuple[Any, Any]:
    graph = tf.Graph()
    with graph.as_default():
        built = build_in_graph(plan, get_model("mlp", plan["training"].get("model_args", {})))
    return graph, built


def test_towers_follow_the_plans_gpu_devices() -> None:
    plan = gpu_plan()
    assert [t.device for t in towers_from_plan(plan)] == [
        "/job:worker/task:0/device:GPU:0", "/job:worker/task:1/device:GPU:0",
    ]
    graph, built = build(plan)
    assert [t.loss.device for t in built.towers] == [
        "/job:worker/task:0/device:GPU:0", "/job:worker/task:1/device:GPU:0",
    ]
    # Every op of a tower's forward and backward pass stays on its GPU, except variable handles (on the PS).
    for index in (0, 1):
        ops = [op for op in graph.get_operations() if op.name.startswith(f"tower_{index}/")]
        compute = [op for op in ops if op.type in ("MatMul", "Relu", "SparseSoftmaxCrossEntropyWithLogits")]
        assert len(compute) >= 6  # forward and gradient matmuls of 3 layers at least
        for op in compute:
            assert op.device == f"/job:worker/task:{index}/device:GPU:0", (op.name, op.device)


def test_a_worker_with_several_gpus_gets_a_tower_on_each() -> None:
    """gpus_per_task = 2: worker 0 sees GPUs 0,1 as GPU:0 and GPU:1, worker 1 its own one GPU: three towers;
    the client's input crosses to each worker once per tower, counted per worker."""
    config = Config.model_validate({
        "cluster": {"mode": "in-graph", "base_port": 30100},
        "hosts": [
            {"name": "client", "address": "10.0.0.1", "roles": ["chief"]},
            {"name": "gpu-a", "address": "10.0.0.11", "roles": ["worker"], "gpus": [2, 3], "gpus_per_task": 2},
            {"name": "gpu-b", "address": "10.0.0.12", "roles": ["worker"], "gpus": [0]},
            {"name": "ps-1", "address": "10.0.0.21", "roles": ["ps"]},
        ],
        "training": {"model": "mlp", "batch_size": 16, "slowdown": {"worker:0": 2.0}},
    })
    plan = plan_config(config).to_json()
    towers = towers_from_plan(plan)
    assert [(t.name, t.device, t.slowdown) for t in towers] == [
        ("worker-0-gpu0", "/job:worker/task:0/device:GPU:0", 2.0),
        ("worker-0-gpu1", "/job:worker/task:0/device:GPU:1", 2.0),
        ("worker-1", "/job:worker/task:1/device:GPU:0", 1.0),
    ]
    graph, built = build(plan)
    assert [t.loss.device for t in built.towers] == [t.device for t in towers]
    assert built.examples_per_step == 3 * 16
    per_tower = 16 * 32 * 4 + 16 * 4
    assert built.input_bytes_per_step() == {"worker-0": 2 * per_tower, "worker-1": per_tower}
    ops = [op for op in graph.get_operations() if op.name.startswith("tower_0_gpu1/") and op.type == "MatMul"]
    assert ops and all(op.device == "/job:worker/task:0/device:GPU:1" for op in ops)


def test_variables_are_spread_over_both_ps_tasks_by_bytes() -> None:
    _, built = build(gpu_plan())
    ps = {task_of(v.device) for v in built.variables}
    assert ps == {"ps:0", "ps:1"}
    trainable = [v for v in built.variables if v.trainable]
    assert trainable and all(v.device.startswith("/job:ps/task:") for v in built.variables)
    loads = {p: sum(v.nbytes for v in trainable if task_of(v.device) == p) for p in ps}
    assert min(loads.values()) > 0.25 * max(loads.values())  # greedy by bytes, not round-robin by count


def test_client_splits_the_batch_and_aggregates() -> None:
    graph, built = build(gpu_plan(input="client"))
    splits = [op for op in graph.get_operations() if op.type == "Split"]
    assert splits and all(op.device == CLIENT_DEVICE for op in splits)
    assert built.loss.device == CLIENT_DEVICE
    agg = [op for op in graph.get_operations() if op.name.startswith("aggregate/")]
    assert agg and all(op.device == CLIENT_DEVICE for op in agg)
    # The update itself runs where each variable lives (colocated with it on its PS task).
    applies = [op for op in graph.get_operations() if op.type.startswith("ResourceApply")]
    assert applies and all(op.device.startswith("/job:ps/task:") for op in applies)
    # 16 examples x 32 float32 features + 16 int32 labels cross to each worker per step.
    assert built.input_bytes_per_step() == {"worker-0": 16 * 32 * 4 + 16 * 4, "worker-1": 16 * 32 * 4 + 16 * 4}
    assert built.examples_per_step == 32


def test_worker_input_is_drawn_on_each_worker() -> None:
    graph, built = build(gpu_plan(input="worker"))
    assert not [op for op in graph.get_operations() if op.type == "Split"]
    normals = [op for op in graph.get_operations() if op.type == "RandomStandardNormal"]
    assert {op.device for op in normals} == {"/job:worker/task:0/device:GPU:0", "/job:worker/task:1/device:GPU:0"}
    assert built.input_bytes_per_step() == {}


def test_straggler_sleep_runs_on_the_slow_workers_device() -> None:
    graph, built = build(gpu_plan(slowdown={"worker:1": 4.0}))
    sleeps = [op for op in graph.get_operations() if op.type == "DatasetToSingleElement"]
    assert [op.device for op in sleeps] == ["/job:worker/task:1/device:GPU:0"]
    assert built.towers[0].delay_us is None and built.towers[1].delay_us is not None
    # Tower 1's gradients leave the worker only after the sleep: the client's average depends on it.
    sleep = sleeps[0]
    gated = [op for op in graph.get_operations() if sleep in op.control_inputs]
    assert gated and all(op.device == "/job:worker/task:1/device:GPU:0" for op in gated)


def test_checkpoint_is_written_by_the_client_unsharded() -> None:
    graph, built = build(gpu_plan())
    assert not built.saver._sharded
    saves = [op for op in graph.get_operations() if op.type == "SaveV2"]
    assert len(saves) == 1 and saves[0].device == CLIENT_DEVICE


def test_task_of_parses_devices() -> None:
    assert task_of("/job:worker/replica:0/task:1/device:GPU:0") == "worker:1"
    assert task_of("/job:ps/task:0") == "ps:0"
    assert task_of("") == ""


def test_optimizer_slots_stay_on_the_ps_tasks() -> None:
    _, built = build(gpu_plan(optimizer="adam"))
    slots = [v for v in built.variables if "Adam" in v.name or "power" in v.name]
    assert slots, [v.name for v in built.variables]
    assert all(v.device.startswith("/job:ps/task:") for v in built.variables), built.variables


def test_shared_checkpoint_dir_shards_the_save_onto_each_ps() -> None:
    """shared_checkpoint_dir: every PS task writes its own shard (needs a filesystem all of them share)."""
    graph, built = build(gpu_plan(shared_checkpoint_dir=True, checkpoint_dir="/shared/ckpt"))
    assert built.saver._sharded
    saves = [op for op in graph.get_operations() if op.type == "SaveV2"]
    # one shard per PS device (the global step may get a shard of its own on its PS): none on the client
    assert {task_of(op.device) for op in saves} == {"ps:0", "ps:1"}, [op.device for op in saves]
