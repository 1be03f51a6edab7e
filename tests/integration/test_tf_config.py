"""Each task's TF_CONFIG, read by TensorFlow's own TFConfigClusterResolver, says what the plan says."""

from __future__ import annotations

import json
from typing import Any

import pytest
import tensorflow as tf

from orchestrator.config.schema import Config
from orchestrator.plan.from_file import plan_config
from orchestrator.plan.model import ClusterPlan

pytestmark = pytest.mark.integration


def host(name: str, address: str, roles: list[str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "address": address, "roles": roles, **extra}


CLUSTERS = {
    "between-graph, worker 0 is chief": (
        [host("ps-0", "127.0.0.2", ["ps"]), host("ps-1", "127.0.0.3", ["ps"]),
         host("w", "127.0.0.4", ["worker"], workers=3)],
        {"mode": "between-graph", "base_port": 23100},
    ),
    "between-graph with a chief job on a GPU": (
        [host("ps-0", "10.0.0.20", ["ps"]), host("gpu-a", "10.0.0.11", ["chief", "worker"], gpus=[0, 1, 2]),
         host("gpu-b", "gpu-b.internal", ["worker"], gpus=[0, 1])],
        {"mode": "between-graph", "base_port": 40000},
    ),
    "in-graph client on the chief host": (
        [host("client", "127.0.0.2", ["chief"]), host("ps", "127.0.0.3", ["ps"]),
         host("w", "127.0.0.4", ["worker"], workers=2)],
        {"mode": "in-graph", "base_port": 23200},
    ),
}


@pytest.fixture(params=list(CLUSTERS), ids=list(CLUSTERS))
def plan(request: pytest.FixtureRequest) -> ClusterPlan:
    hosts, cluster = CLUSTERS[request.param]
    return plan_config(Config.model_validate({"hosts": hosts, "cluster": cluster}))


def test_resolver_reads_each_tasks_tf_config(plan: ClusterPlan, monkeypatch: pytest.MonkeyPatch) -> None:
    for task in plan.tasks:
        # exactly the string the supervisor puts in the task's environment
        monkeypatch.setenv("TF_CONFIG", task.env["TF_CONFIG"])
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        assert resolver.cluster_spec().as_dict() == plan.cluster_spec
        assert resolver.task_type == task.job
        assert resolver.task_id == task.index
        assert resolver.master() == task.target  # what a session target or server would use
        spec = tf.train.ClusterSpec(plan.cluster_spec)
        assert spec.task_address(task.job, task.index) == task.target
    assert json.loads(plan.chief.env["TF_CONFIG"])["task"]["type"] == plan.chief.job


TF2_CLUSTERS = {
    "multi-worker-mirrored, workers only": dict(mode="multi-worker-mirrored", workers=3),
    "multi-worker-mirrored with a chief": dict(mode="multi-worker-mirrored", workers=2, chief=True),
    "parameter-server-strategy": dict(mode="parameter-server-strategy", workers=2, ps=2),
}


@pytest.mark.parametrize("shape", list(TF2_CLUSTERS), ids=list(TF2_CLUSTERS))
def test_resolver_reads_the_tf2_modes_tf_config(shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The TF_CONFIG the TF2 strategies read: MultiWorkerMirroredStrategy's (no ps job; its chief is the `chief`
    task or worker 0) and ParameterServerStrategy's (the coordinator is the `chief` task)."""
    from tensorflow.python.distribute import multi_worker_util  # TF's own numbering, as the oracle

    from testkit.tf2_cluster import tf2_plan

    plan = tf2_plan(**TF2_CLUSTERS[shape])  # type: ignore[arg-type]
    for task in plan.tasks:
        monkeypatch.setenv("TF_CONFIG", task.env["TF_CONFIG"])
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        spec = resolver.cluster_spec()
        assert spec.as_dict() == plan.cluster_spec
        assert (resolver.task_type, resolver.task_id) == (task.job, task.index)
        assert resolver.master() == task.target
        if plan.mode == "multi-worker-mirrored":
            assert "ps" not in spec.jobs
            assert multi_worker_util.is_chief(spec, task.job, task.index) == task.is_chief
    if plan.mode == "parameter-server-strategy":
        assert plan.chief.job == "chief" and set(plan.cluster_spec) == {"chief", "ps", "worker"}
