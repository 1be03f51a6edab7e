"""Where things go: variables on the PS tasks (greedy by bytes), compute on the task's own device.

- `variable_setter`: `tf.compat.v1.train.replica_device_setter` with the cluster, the task's device from
  the plan as `worker_device` (…/device:GPU:0 when the plan gives the task a GPU) and a GreedyByBytes
  `ps_strategy`. Use it with `tf.compat.v1.device(...)` (a device *function*, which `tf.device` refuses).
- `session_config`: soft placement, device filters, and (`cluster`) the session's own cluster for a task that
  joins a running cluster (ClusterSpec propagation, training/cluster/joining.py). Soft placement only moves the ops that have no GPU
  kernel to the CPU: a task the plan gives GPUs has checked that TensorFlow sees them before it got here
  (training/probes/gpu_check.py, from training/task.py), so a GPU tower never quietly trains on a CPU.
- `placed_variables` / `placement_lines`: what the graph requested, for the task's log and the telemetry;
  the trainers log where each tower and variable then really ran ("landed on", from the run metadata).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from ..telemetry.accounting import PlacedVariable
from .placement import GreedyByBytes

v1 = tf.compat.v1


def variable_setter(cluster_spec: Mapping[str, Sequence[str]],
                    worker_device: str) -> tuple[Callable[[Any], str], GreedyByBytes]:
    num_ps = len(cluster_spec.get("ps", []))
    if num_ps == 0:
        raise ValueError("the cluster has no ps task to hold the variables")
    strategy = GreedyByBytes(num_ps)
    setter = v1.train.replica_device_setter(
        ps_tasks=num_ps, ps_device="/job:ps", worker_device=worker_device,
        cluster=tf.train.ClusterSpec({k: list(v) for k, v in cluster_spec.items()}), ps_strategy=strategy,
    )
    return setter, strategy


def session_config(*, device_filters: Iterable[str] | None = None, cpu_only: bool = False,
                   cluster: Mapping[str, Sequence[str]] | None = None) -> Any:
    config = v1.ConfigProto(allow_soft_placement=True)
    if device_filters:
        config.device_filters.extend(device_filters)
    if cpu_only:
        config.device_count["GPU"] = 0
    if cluster is not None:
        # Every task the session uses resolves the others from this cluster, for this session only: a ps
        # that started before this task was planned reaches it (to pull its gradients) all the same.
        config.cluster_def.CopyFrom(tf.train.ClusterSpec({k: list(v) for k, v in cluster.items()}).as_cluster_def())
        # Without it each such session sees its own fresh resources on the ps: uninitialised variables,
        # another global step, empty done queues.
        config.experimental.share_session_state_in_clusterspec_propagation = True
    return config


def _nbytes(var: Any) -> int:
    shape = var.shape.as_list() if var.shape.rank is not None else []
    return int(math.prod(d or 1 for d in shape)) * int(var.dtype.base_dtype.size)


def placed_variables(graph: Any = None) -> list[PlacedVariable]:
    """Every global variable with the device the graph requested and its bytes.

    The accounting pulls trainable variables and the global step each step; optimizer slots (Adam's m
    and v) stay on the PS and are marked non-trainable and not `pulled` (see `pulled_variables`).
    """
    graph = graph or v1.get_default_graph()
    with graph.as_default():
        trainable = {v.op.name for v in v1.trainable_variables()}
        return [PlacedVariable(v.op.name, v.device, _nbytes(v), trainable=v.op.name in trainable)
                for v in v1.global_variables()]


def pulled_variables(variables: Iterable[PlacedVariable], global_step_name: str = "global_step") -> list[PlacedVariable]:
    """What a training step reads from the PS tasks: the trainable variables and the global step."""
    return [v for v in variables if v.trainable or v.name == global_step_name]


def placement_lines(variables: Iterable[PlacedVariable], towers: Mapping[str, str]) -> list[str]:
    """One line per tower and variable: name, bytes, requested device. A GPU asked for here is one
    TensorFlow sees (the task's GPU check passed); where each really ran is logged after the first step."""
    lines = []
    for name, device in towers.items():
        lines.append(f"tower {name} placed on {device}")
    for var in variables:
        lines.append(f"variable {var.name} ({var.nbytes} bytes{'' if var.trainable else ', not trainable'}) "
                     f"placed on {var.device}")
    return lines


def bytes_per_ps(variables: Iterable[PlacedVariable]) -> dict[str, int]:
    from ..telemetry.accounting import ps_task_of

    out: dict[str, int] = {}
    for var in variables:
        ps = ps_task_of(var.device)
        if ps is not None:
            out[ps] = out.get(ps, 0) + var.nbytes
    return dict(sorted(out.items()))
