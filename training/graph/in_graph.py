"""The in-graph client: ONE graph for the whole cluster, built and run by the single `chief` task.

- variables and the global step live on the PS tasks (replica_device_setter, greedy by bytes);
- one tower (the model's forward and backward pass) per GPU of each worker task, on that worker's devices
  from the plan (`/job:worker/task:N/device:GPU:0`, then GPU:1 ... for a worker the plan gives several: it
  sees its CUDA_VISIBLE_DEVICES as GPU:0 ... GPU:M-1), else one on its CPU; workers run nothing but a TF
  server; each tower draws batch_size examples;
- input "client": the client draws the big batch (batch_size x towers) and splits it on its own CPU,
  so every tower's slice crosses the network each step (accounted as `input_bytes` in telemetry);
  input "worker": each tower draws its own batch on its worker;
- the loss and gradient averaging and the optimizer update are placed on the client's CPU
  (`/job:chief/task:0/device:CPU:0`), so one step is one synchronous update by construction;
- `slowdown` on a worker puts a sleep op on that worker's device, after its tower's gradients and
  before they leave the worker: the whole synchronous step waits for it.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from ..cluster.devices import pulled_variables, session_config
from ..cluster.optimizers import make_optimizer
from ..cluster.placement import GreedyByBytes
from ..cluster.ps import serving_targets, signal_done
from ..cluster.straggler import DelayPacer, sleep_op
from ..models import get_model
from ..models.base import Model
from ..run.context import TaskContext
from ..telemetry.accounting import PlacedVariable, ps_bytes_per_step
from ..telemetry.task_summaries import TaskSummaries
from ..telemetry.writer import ProgressReporter
from .checkpointing import ResumingChiefSessionCreator, checkpoint_hook
from .towers import Tower, towers_from_plan

v1 = tf.compat.v1
log = logging.getLogger("tfcluster.in_graph")

CLIENT_DEVICE = "/job:chief/task:0/device:CPU:0"
PsStrategy = Callable[[Any], int]


def ps_task_count(plan: Mapping[str, Any]) -> int:
    return len(plan.get("cluster_spec", {}).get("ps", []))


@dataclass
class TowerOutputs:
    tower: Tower
    loss: tf.Tensor
    started: tf.Tensor  # tf.timestamp() on the tower's device once its input has arrived
    computed: tf.Tensor  # tf.timestamp() once its gradients are computed (before any straggler sleep)
    delay_us: tf.Tensor | None  # fed by the client when the tower is a straggler
    input_bytes: int  # bytes of its input slice that cross from the client per step (0 for input=worker)


@dataclass
class InGraph:
    """Handles to everything the client runs, and the variables with their requested devices."""

    global_step: tf.Variable
    train_op: tf.Operation
    step_after: tf.Tensor  # the global step once this step's update is applied
    loss: tf.Tensor
    towers: list[TowerOutputs]
    examples_per_step: int
    variables: list[PlacedVariable]
    summary_op: tf.Tensor | None
    saver: Any  # tf.compat.v1.train.Saver

    def input_bytes_per_step(self) -> dict[str, int]:
        """Input bytes the client sends each worker task per step (its towers' slices together)."""
        sent: dict[str, int] = {}
        for t in self.towers:
            if t.input_bytes:
                sent[t.tower.task] = sent.get(t.tower.task, 0) + t.input_bytes
        return sent


def _static_nbytes(t: tf.Tensor) -> int:
    shape = t.shape.as_list()
    if any(d is None for d in shape):
        return 0  # unknown statically: not accounted (the built-in models have static shapes)
    return int(math.prod(shape)) * int(t.dtype.size)


def _tower_setter(device: str, n_ps: int, cluster: tf.train.ClusterSpec, strategy: PsStrategy | None) -> Any:
    return v1.train.replica_device_setter(
        ps_tasks=n_ps, ps_device="/job:ps", worker_device=device, cluster=cluster, ps_strategy=strategy
    )


def _gated(grad: Any, gate: tf.Tensor) -> Any:
    """`grad` released only after `gate` ran (IndexedSlices keep their sparsity)."""
    with tf.control_dependencies([gate]):
        if isinstance(grad, tf.IndexedSlices):
            return tf.IndexedSlices(tf.identity(grad.values), tf.identity(grad.indices), grad.dense_shape)
        return tf.identity(grad)


def _average(grads: Sequence[Any]) -> Any:
    """Mean of the towers' gradients for one variable (placed by the caller, on the client)."""
    if any(isinstance(g, tf.IndexedSlices) for g in grads):
        slices = [g if isinstance(g, tf.IndexedSlices) else tf.IndexedSlices(
            g, tf.range(tf.shape(g, out_type=tf.int64)[0]), tf.shape(g, out_type=tf.int64)) for g in grads]
        values = tf.concat([s.values for s in slices], axis=0) / float(len(slices))
        return tf.IndexedSlices(values, tf.concat([tf.cast(s.indices, tf.int64) for s in slices], 0),
                                slices[0].dense_shape)
    return tf.add_n(list(grads)) / float(len(grads))


def build_in_graph(  # noqa: PLR0915 - the one graph, top to bottom
    plan: Mapping[str, Any],
    model: Model,
    *,
    ps_strategy: PsStrategy | None = None,
    optimizer: Any | None = None,
) -> InGraph:
    """Build the in-graph training graph into the current default graph (graph mode)."""
    training = plan.get("training", {})
    towers = towers_from_plan(plan)
    n = len(towers)
    batch_size = int(training.get("batch_size", 128))
    seed = int(training.get("seed", 0))
    input_mode = training.get("input", "client")
    cluster = tf.train.ClusterSpec(plan["cluster_spec"])
    n_ps = ps_task_count(plan)
    if n_ps == 0:
        raise ValueError("in-graph plan has no ps task for the variables")
    opt = optimizer or make_optimizer(str(training.get("optimizer", "sgd")),
                                      float(training.get("learning_rate", 0.05)))
    strategy = ps_strategy if ps_strategy is not None else GreedyByBytes(n_ps)

    with v1.device(_tower_setter(CLIENT_DEVICE, n_ps, cluster, strategy)):
        global_step = v1.train.get_or_create_global_step()

    slices: list[tuple[Any, Any]] = []
    if input_mode == "client":
        # The client owns the big batch; the split is pinned here so each slice is what crosses the wire.
        with tf.device(CLIENT_DEVICE), tf.name_scope("client_input"):
            features, labels = model.input_fn(batch_size * n, seed)
            slices = list(zip(tf.split(features, n, axis=0), tf.split(labels, n, axis=0), strict=True))

    outputs: list[TowerOutputs] = []
    tower_grads: list[list[tuple[Any, Any]]] = []
    for i, tower in enumerate(towers):
        with v1.device(_tower_setter(tower.device, n_ps, cluster, strategy)), tf.name_scope(tower.scope):
            if input_mode == "client":
                f, lab = slices[i]
                f, lab = tf.identity(f, name="features"), tf.identity(lab, name="labels")  # the receive
                input_bytes = _static_nbytes(f) + _static_nbytes(lab)
            else:
                f, lab = model.input_fn(batch_size, seed)
                input_bytes = 0
            with tf.control_dependencies([f, lab]):
                started = tf.timestamp(name="started")
            loss = model.loss(f, lab)
            grads = opt.compute_gradients(loss, colocate_gradients_with_ops=True)
            grads = [(g, var) for g, var in grads if g is not None]
            with tf.control_dependencies([g.values if isinstance(g, tf.IndexedSlices) else g for g, _ in grads]):
                computed = tf.timestamp(name="computed")
            delay_us = None
            if tower.slowdown > 1.0:
                with tf.device(CLIENT_DEVICE):
                    delay_us = v1.placeholder_with_default(tf.constant(0, tf.int64), [], name="straggler_delay_us")
                with tf.control_dependencies([computed]):
                    slept = sleep_op(delay_us)
                grads = [(_gated(g, slept), var) for g, var in grads]
        outputs.append(TowerOutputs(tower, loss, started, computed, delay_us, input_bytes))
        tower_grads.append(grads)

    variables_by_name = {var.op.name: var for _, var in tower_grads[0]}
    with tf.device(CLIENT_DEVICE), tf.name_scope("aggregate"):
        loss = tf.add_n([o.loss for o in outputs]) / float(n)
        averaged = []
        for name, var in variables_by_name.items():
            per_tower = [dict((v.op.name, g) for g, v in grads)[name] for grads in tower_grads]
            averaged.append((_average(per_tower), var))
    with v1.device(_tower_setter(CLIENT_DEVICE, n_ps, cluster, strategy)):
        train_op = opt.apply_gradients(averaged, global_step=global_step)
    with tf.device(CLIENT_DEVICE):
        with tf.control_dependencies([train_op]):
            step_after = tf.identity(global_step.read_value(), name="step_after")
        summary_op = v1.summary.scalar("loss", loss)
        # Non-sharded by default: one SaveV2 on the client writes the whole checkpoint on the client's machine.
        # Relative paths in the `checkpoint` file: a copy of the directory (pull) restores on its own.
        saver = v1.train.Saver(sharded=bool(training.get("shared_checkpoint_dir", False)), max_to_keep=3,
                               save_relative_paths=True)

    trainable = {var.op.name for var in v1.trainable_variables()}
    placed = [PlacedVariable(var.op.name, var.device, _static_nbytes(var), trainable=var.op.name in trainable)
              for var in v1.global_variables()]
    return InGraph(
        global_step=global_step, train_op=train_op, step_after=step_after, loss=loss, towers=outputs,
        examples_per_step=batch_size * n, variables=placed, summary_op=summary_op, saver=saver,
    )


_JOB_TASK = re.compile(r"/job:(\w+)/(?:replica:\d+/)?task:(\d+)")


def task_of(device: str) -> str:
    """'/job:worker/replica:0/task:1/device:CPU:0' -> 'worker:1' ('' when the device names no task)."""
    m = _JOB_TASK.search(device or "")
    return f"{m.group(1)}:{m.group(2)}" if m else ""


# ---- telemetry ------------------------------------------------------------------------------------------

class InGraphReporter(ProgressReporter):
    """`progress` events of the in-graph client, with two extra fields (consumers ignore unknown ones):

    - `input_bytes`: {"worker-0": n, ...} bytes of input the client sent each worker in the interval
      (input = "client": the big batch's slices cross the network every step; absent for input = "worker");
    - `towers`: {"worker-0": {"compute_s", "delay_s"}, ...} (a worker with several GPUs: "worker-0-gpu0",
      "worker-0-gpu1", ...): the last step's tower compute time (timestamps taken on the tower's own device:
      input arrived -> gradients computed) and the straggler delay injected there;
    - `step_s`: the client's wall time of that last step (every tower advances once per step).
    """

    def __init__(self, path: str, *, input_bytes_per_step: Mapping[str, int], **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.input_bytes_per_step = dict(input_bytes_per_step)
        self.towers: dict[str, Any] = {}  # replaced (one assignment) by the loop each step
        self.step_s: float | None = None

    def _event(self, sample: tuple[int, int, int | None, float], now: float) -> dict[str, Any]:
        event = super()._event(sample, now)
        steps = int(event.get("steps", 0))
        if self.input_bytes_per_step:
            event["input_bytes"] = {k: v * steps for k, v in self.input_bytes_per_step.items()}
        if self.towers:
            event["towers"] = self.towers
        if self.step_s is not None:
            event["step_s"] = self.step_s
        return event


# ---- the client -----------------------------------------------------------------------------------------

def _say(message: str) -> None:
    print(f"[in-graph client] {message}", flush=True)


_SessionRunHook: Any = v1.train.SessionRunHook


class SessionLogHook(_SessionRunHook):  # type: ignore[misc]  # TensorFlow ships no types
    """Logs every (re)creation of the session: after a PS or worker restart MonitoredTrainingSession
    recreates it and restores the variables from the latest checkpoint."""

    def __init__(self, global_step: Any) -> None:
        self.global_step = global_step
        self.sessions = 0

    def after_create_session(self, session: Any, coord: Any) -> None:
        self.sessions += 1
        step = int(session.run(self.global_step))
        what = "session ready" if self.sessions == 1 else f"session recreated (#{self.sessions}) after a failure"
        _say(f"{what} at global step {step}")


def log_requested_placement(graph: InGraph) -> None:
    for t in graph.towers:
        _say(f"tower {t.tower.name} requested on {t.loss.device}"
             + (f" (straggler x{t.tower.slowdown:g})" if t.tower.slowdown > 1.0 else ""))
    _say(f"aggregation and update requested on {CLIENT_DEVICE}")
    for var in graph.variables:
        _say(f"variable {var.name} ({var.nbytes} bytes) requested on {var.device}")


def log_actual_placement(graph: InGraph, run_metadata: Any) -> dict[str, str]:
    """Where the runtime really put each tower and variable (soft placement may differ from the request)."""
    assigned: dict[str, str] = {}
    for partition in run_metadata.partition_graphs:
        for node in partition.node:
            assigned[node.name] = node.device
    landed: dict[str, str] = {}
    for t in graph.towers:
        landed[t.tower.name] = assigned.get(t.loss.op.name, "?")
        _say(f"tower {t.tower.name} landed on {landed[t.tower.name]}")
    for var in graph.variables:
        landed[var.name] = assigned.get(var.name, "?")
        _say(f"variable {var.name} landed on {landed[var.name]}")
    return landed


def run_client(ctx: TaskContext, *, stop_cluster: Callable[[], None] | None = None) -> int:
    """Run in-graph training to `training.steps` as the cluster's single client (the `chief` task).

    `stop_cluster` is called at the end (after the final checkpoint) to tell the ps and worker servers to
    exit; by default it uses training.cluster.ps's done-queue contract. Returns the exit code.
    """
    import time

    v1.disable_eager_execution()
    plan = ctx.plan
    training = ctx.training
    layout = ctx.layout
    host = ctx.host
    server = tf.distribute.Server(tf.train.ClusterSpec(plan["cluster_spec"]), job_name="chief", task_index=0,
                                  config=session_config(), start=True)
    _say(f"server {server.target} up; {len(towers_from_plan(plan))} towers, "
         f"input={training.get('input', 'client')}")

    model = get_model(str(training.get("model", "mlp")), training.get("model_args") or {})
    graph = build_in_graph(plan, model)
    log_requested_placement(graph)

    steps = int(training.get("steps", 1000))
    checkpoint_dir = layout.checkpoints(str(training.get("checkpoint_dir", "checkpoints")))
    scaffold = v1.train.Scaffold(saver=graph.saver, summary_op=graph.summary_op)
    hooks = [v1.train.StopAtStepHook(last_step=steps), SessionLogHook(graph.global_step),
             checkpoint_hook(checkpoint_dir, scaffold, training.get("checkpoint_every_steps"),
                             training.get("checkpoint_every_secs")),
             v1.train.SummarySaverHook(save_steps=int(training.get("summary_every_steps", 100)),
                                       output_dir=checkpoint_dir, scaffold=scaffold)]
    n_towers = len(graph.towers)
    reporter = InGraphReporter(
        layout.events_file("chief", 0), host=host, job="chief", task=0,
        interval=float(training.get("progress_interval", 1.0)),
        # every tower reads every variable from its PS each step; the client pushes one averaged update
        ps_bytes_per_step=ps_bytes_per_step(pulled_variables(graph.variables), pulls_per_step=n_towers),
        input_bytes_per_step=graph.input_bytes_per_step(),
        summaries=TaskSummaries(layout.summaries_dir("chief", 0), int(training.get("summary_every_steps", 100))),
    )
    pacer = DelayPacer()
    slowed = [t for t in graph.towers if t.delay_us is not None]
    fetches = {
        "train": graph.train_op, "step": graph.step_after, "loss": graph.loss,
        "times": [(t.started, t.computed) for t in graph.towers],
    }
    local_step = 0
    examples = 0
    reporter.start()
    try:
        # A restarted client joins the variables the ps still hold; it restores the latest checkpoint only
        # when a ps lost them (training/graph/checkpointing.py).
        creator = ResumingChiefSessionCreator(scaffold=scaffold, master=server.target, config=session_config(),
                                              checkpoint_dir=checkpoint_dir)
        with v1.train.MonitoredSession(session_creator=creator, hooks=hooks) as sess:
            while not sess.should_stop():
                delays = {t.tower.name: pacer.delay_s(t.tower.slowdown) for t in slowed}
                feed = {t.delay_us: int(delays[t.tower.name] * 1e6) for t in slowed}
                first = local_step == 0
                options = v1.RunOptions(output_partition_graphs=True) if first else None
                metadata = v1.RunMetadata() if first else None
                started = time.perf_counter()
                out = sess.run(fetches, feed_dict=feed, options=options, run_metadata=metadata)
                wall = time.perf_counter() - started
                if first:
                    log_actual_placement(graph, metadata)
                if slowed:
                    pacer.observe(wall, max(delays.values()))
                local_step += 1
                examples += graph.examples_per_step
                reporter.towers = {
                    t.tower.name: {"compute_s": round(float(b - a), 6), "delay_s": round(delays.get(t.tower.name, 0.0), 6)}
                    for t, (a, b) in zip(graph.towers, out["times"], strict=True)
                }
                reporter.step_s = round(wall, 6)
                reporter.record(local_step, int(out["step"]), examples, float(out["loss"]))
    finally:
        reporter.close()
    _say(f"done: {local_step} steps in this process, checkpoints in {checkpoint_dir}")
    if stop_cluster is not None:
        stop_cluster()
    else:
        targets = serving_targets("in-graph", plan["cluster_spec"])
        signalled = signal_done(lambda *_: server.target, ctx.run_id, "chief:0", targets, "/job:chief/task:0")
        missing = sorted(set(targets) - set(signalled))
        _say("told every ps and worker server to stop" if not missing else f"could not tell {missing} to stop")
    return 0
