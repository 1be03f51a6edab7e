"""The layout of a [slurm] job against TensorFlow's own SlurmClusterResolver, run in this process (real
TensorFlow) on the environment Slurm gives each rank of a step (SLURM_PROCID, SLURM_STEP_NODELIST,
SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NUM_TASKS): for several job counts, node counts and GPU counts, every
rank is the same job:task on the same node, and every training task sees the same GPUs. The GPUs are fake
(this machine has none): the resolver is told how many a node has, as `gpus_per_node` tells the plan.
The integration test tests/integration/test_slurm_resolver.py does the same inside a real allocation."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from orchestrator.config.schema import Config
from orchestrator.config.validate import validate
from orchestrator.plan.slurm import NODE_ADDR, NODE_NAME, SlurmNode, SlurmPlan, plan_slurm, spread
from tests.requires import tensorflow


def slurm_plan(mode: str, nodes: list[str] | int, **slurm: Any) -> SlurmPlan:
    count = nodes if isinstance(nodes, int) else len(nodes)
    config = Config.model_validate({"cluster": {"mode": mode}, "slurm": {"nodes": count, **slurm}})
    allocation = None if isinstance(nodes, int) else [SlurmNode(n, f"10.1.0.{i}") for i, n in enumerate(nodes)]
    return plan_slurm(validate(config), nodes=allocation)


def natural(name: str) -> tuple[str, int]:
    """Slurm's node order (its hostlists count n2 before n10); the resolver sorts the names as strings."""
    stem = name.rstrip("0123456789")
    return stem, int(name[len(stem):] or 0)


CASES = [
    ("between-graph", ["n1", "n2", "n3"], {"workers": 2}, 0),
    ("between-graph", ["n1", "n2", "n3"], {"workers": 4, "ps": 2, "chief": True}, 6),  # 7 tasks: 3, 2, 2
    ("multi-worker-mirrored", ["a7", "a8", "a9"], {"workers": 4}, 4),  # 2, 1, 1
    ("parameter-server-strategy", ["gpu-b", "gpu-a"], {"workers": 3, "ps": 2}, 3),  # the coordinator too: 3, 3
    ("in-graph", ["x1", "x2", "x3", "x4"], {"workers": 5}, 8),  # 7 tasks: 2, 2, 2, 1
    ("between-graph", [f"n{i}" for i in range(1, 13)], {"workers": 12}, 0),  # sorted as strings: n1, n10, n11, n12, n2
]


@pytest.mark.parametrize(("mode", "nodes", "counts", "gpus"), CASES,
                         ids=[f"{c[0]}-{len(c[1])}nodes-{c[3]}gpus" for c in CASES])
def test_every_rank_is_where_the_resolver_puts_it(monkeypatch: pytest.MonkeyPatch, mode: str, nodes: list[str],
                                                  counts: dict[str, Any], gpus: int) -> None:
    tf = tensorflow()
    plan = slurm_plan(mode, nodes, gpus_per_node=gpus, **counts)
    per_node = Counter(plan.plan.task(t.job, t.index).host for t in plan.ranks)
    slurm_order = sorted(nodes, key=natural)
    jobs = {job: len(addresses) for job, addresses in plan.plan.cluster_spec.items()}
    monkeypatch.setenv("SLURM_STEP_NODELIST", ",".join(slurm_order))
    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", ",".join(str(per_node[n]) for n in slurm_order))
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", str(len(plan.ranks)))
    for rank, task in enumerate(plan.ranks):
        monkeypatch.setenv("SLURM_PROCID", str(rank))
        # A CPU-only job still tells the resolver of one fake GPU per task: with none it cannot split any.
        resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
            jobs=jobs, gpus_per_node=gpus or max(per_node.values()), auto_set_gpu=False)
        spec = resolver.cluster_spec().as_dict()
        assert resolver.get_task_info() == (task.job, task.index), rank
        assert spec[task.job][task.index].split(":")[0] == task.host
        on_cpu = task.job == "ps" or (task.job == "chief" and mode in ("in-graph", "parameter-server-strategy"))
        if gpus and not on_cpu:
            assert task.cuda_visible_devices == resolver._gpu_allocation[rank]  # the resolver's own split
    assert [job for job, _ in sorted(jobs.items())] == list(plan.plan.cluster_spec)  # TF_CONFIG's job order


def test_tasks_spread_evenly_the_first_nodes_taking_one_more() -> None:
    assert spread(4, 3) == (2, 1, 1)
    assert spread(7, 3) == (3, 2, 2)
    assert spread(6, 3) == (2, 2, 2)
    assert spread(3, 3) == (1, 1, 1)


def test_before_the_allocation_the_plan_is_in_node_indexes() -> None:
    plan = slurm_plan("between-graph", 2, workers=3, chief=True)
    assert [(n.name, n.address) for n in plan.nodes] == [
        (NODE_NAME.format(0), NODE_ADDR.format(0)), (NODE_NAME.format(1), NODE_ADDR.format(1))]
    assert [(node.name, [t.name for t in tasks]) for node, tasks in plan.layout()] == [
        ("<node-0>", ["chief:0", "ps:0", "worker:0"]), ("<node-1>", ["worker:1", "worker:2"])]
    assert plan.plan.cluster_spec["worker"][1].startswith("<node-1-addr>:")
    assert not plan.allocated


def test_after_it_tasks_dial_the_node_addresses_and_ports_stay_unique_across_the_job() -> None:
    plan = slurm_plan("between-graph", ["n2", "n1"], workers=3, ps=2)
    assert [n.name for n in plan.nodes] == ["n1", "n2"]  # the resolver's order
    hosts = {h.name: h for h in plan.plan.hosts}
    assert (hosts["n1"].address, hosts["n1"].dial_address) == ("n1", "10.1.0.1")  # srun -w n1; TF dials NodeAddr
    assert plan.plan.task("ps", 0).target == f"10.1.0.1:{plan.plan.task('ps', 0).port}"
    ports = [t.port for t in plan.plan.tasks] + [h.control_port for h in plan.plan.hosts]
    assert len(ports) == len(set(ports))  # several nodes may be one machine (TF listens on every interface)
    assert hosts["n1"].roles == ("ps", "worker") and hosts["n2"].roles == ("worker",)  # 3, 2 tasks


def test_gpus_split_as_the_resolver_splits_them_ps_and_clients_on_the_cpu() -> None:
    plan = slurm_plan("in-graph", 2, workers=3, gpus_per_node=4)  # chief (client), ps, 3 workers: 3, 2
    assert plan.gpus_per_task == 1
    devices = {t.name: (t.cuda_visible_devices, t.device) for t in plan.ranks}
    assert devices["chief:0"] == ("", "/job:chief/task:0/device:CPU:0")
    assert devices["ps:0"] == ("", "/job:ps/task:0/device:CPU:0")
    assert devices["worker:0"] == ("2", "/job:worker/task:0/device:GPU:0")  # the 3rd task of node 0
    assert [devices[f"worker:{i}"][0] for i in (1, 2)] == ["0", "1"]
    assert any("1 GPU(s) of the busiest nodes stay idle" in w for w in plan.plan.warnings)
