"""`mode = "parameter-server-strategy"`: the `chief` task is the coordinator of a
tf.distribute.ParameterServerStrategy; the `ps` and `worker` tasks run standard TF servers
(training/cluster/ps.py `serve`, with its done queues). No Keras.

- Variables (step counter first, then the model's in sizes.py order) on the ps tasks greedy by bytes
  (training/tf2/placement.py, the plan's rule); optimizer slots next to their variable.
- Input: a per-worker dataset (ClusterCoordinator.create_per_worker_dataset); each worker draws its own
  batches of [training] batch_size, keyed by seed and its worker index
  (tf.distribute.coordinator.experimental_get_current_worker_index).
- Steps (training/tf2/coordinator_loop.py): one scheduled tf.function step per global step ([training]
  steps in total, from the restored step), at most IN_FLIGHT_PER_WORKER per worker ahead, each result
  ([loss, worker index, global step after the update], packed into one tensor) fetched in order. Updates
  are asynchronous (each worker's step updates the PS variables as it finishes).
- Telemetry: training/tf2/coordinator_telemetry.py (the coordinator writes the workers' progress events).
- Checkpoints: the coordinator's tf.train.CheckpointManager (step, model, optimizer slots) in
  RunLayout.checkpoints(checkpoint_dir) on its own host, after joining the steps in flight; restored at start,
  always: a coordinator's variables on the ps tasks are its own (TF2 eager variables are anonymous
  resources of the context that created them), so a new coordinator cannot join the live ones and trains
  from the last checkpoint. SIGTERM writes one before the coordinator exits (coordinator_loop.py), so a
  restart asked for loses nothing; a SIGKILL or crash loses what was done since the last checkpoint
  (checkpoint_every_steps / checkpoint_every_secs bound it).
  Summaries (`loss`) next to them every summary_every_steps.
- Failures (TF's own handling): a worker that dies has its steps re-run on the others and is used again once
  it is back (its supervisor restarts it); a ps task that dies fails the coordinator (exit 1): its
  supervisor restarts it, and the new coordinator restores the last checkpoint into the restarted ps
  (riding out the workers' reconnect backoff to it: training/tf2/coordinator_loop.py).
- End: after the final checkpoint the coordinator enqueues its token on every ps and worker done queue
  (training/cluster/ps.py signal_done, through each target's own server), so the servers exit 0 by themselves.
- Slowdown: a slowed worker sleeps (factor - 1) x its own step time inside the step (training/cluster/straggler.py
  sleep_op, on the worker), the factor picked by worker index from a per-step constant.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import tensorflow as tf

from ..cluster.devices import pulled_variables
from ..cluster.ps import serving_targets, signal_done
from ..cluster.straggler import sleep_op
from ..run.context import TaskContext, TaskSetupError
from ..run.roles import PS_STRATEGY
from ..telemetry.accounting import ps_bytes_per_step
from .coordinator_loop import CoordinatorLoop
from .coordinator_telemetry import CoordinatorTelemetry
from .models import Tf2Model, get_tf2_model
from .optimizer import PlainOptimizer
from .placement import GreedyPsPlacer
from .settings import TrainSettings

log = logging.getLogger("tfcluster.ps_strategy")

IN_FLIGHT_PER_WORKER = 4  # scheduled steps per worker not yet fetched: keeps every worker busy
TERMINATED_EXIT = 128 + 15  # as a process killed by SIGTERM: not finished (0 would finish the run)


class PssTrainer:
    def __init__(self, ctx: TaskContext, s: TrainSettings, strategy: tf.distribute.Strategy) -> None:
        self.ctx = ctx
        self.s = s
        self.strategy = strategy
        self.workers = len(ctx.cluster_spec.get("worker", []))
        try:
            self.model: Tf2Model = get_tf2_model(s.model, s.model_args)
            self.optimizer = PlainOptimizer(s.optimizer, s.learning_rate)
        except ValueError as e:
            raise TaskSetupError(f"[training] {e}") from e
        self.factors = [s.slowdown_of("worker", k) for k in range(self.workers)]
        with strategy.scope():
            self.placer = GreedyPsPlacer(strategy, ctx.num_ps)
            self.step = self.placer.create("global_step", lambda: tf.constant(0, tf.int64), 8, trainable=False)
            self.model.build(self.placer.model_variable, s.seed)
            self.optimizer.build(strategy, self.model.weights)
        self.checkpoint = tf.train.Checkpoint(step=self.step, model=self.model, optimizer=self.optimizer)
        self.train_step = tf.function(self._step_fn)

    def placed(self) -> list[Any]:
        return self.placer.placed_variables(self.optimizer.slot_variables())

    def dataset_fn(self, start: int) -> Any:
        """Runs on each worker: its own endless stream of batches, from batch index `start`."""
        def fn() -> tf.data.Dataset:
            shard = tf.distribute.coordinator.experimental_get_current_worker_index()
            batches = tf.data.Dataset.counter(start=start)
            return batches.map(lambda i: self.model.batch(self.s.batch_size, self.s.seed, shard, i)).prefetch(2)
        return fn

    def _step_fn(self, iterator: Any) -> tf.Tensor:
        """One step on a worker; returns [loss, worker index, global step after it] as ONE float64 tensor:
        the coordinator copies each returned tensor with its own RPC (packed: ~40 % more steps/s here)."""
        started = tf.timestamp()
        features, labels = next(iterator)
        worker = tf.distribute.coordinator.experimental_get_current_worker_index()

        def replica_fn(f: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, list[tf.Tensor]]:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(self.model.per_example_loss(f, y))
            return loss, tape.gradient(loss, self.model.weights)

        loss, grads = self.strategy.run(replica_fn, args=(features, labels))
        with tf.control_dependencies(self.optimizer.apply(self.strategy, grads, self.model.weights)):
            new_step = self.step.assign_add(1)
        if any(f > 1.0 for f in self.factors):
            with tf.control_dependencies([new_step]):
                took_s = tf.timestamp() - started
            factor = tf.gather(tf.constant(self.factors, tf.float64), worker)
            slept = sleep_op(tf.cast((factor - 1.0) * took_s * 1e6, tf.int64))
            with tf.control_dependencies([slept]):
                new_step = tf.identity(new_step)
        return tf.stack([tf.cast(loss, tf.float64), tf.cast(worker, tf.float64), tf.cast(new_step, tf.float64)])

    def ps_tasks_hold_variables(self) -> bool:
        """Whether every ps task still has this run's variables (a restarted one has none)."""
        try:
            for anchor in self.placer.anchors:
                if anchor is not None:
                    anchor.read_value().numpy()
        except tf.errors.OpError as e:
            log.info("%s: a ps task lost its variables or is unreachable: %s", self.ctx.name,
                     str(e).splitlines()[0])
            return False
        return True

    def restore(self) -> int:
        latest = tf.train.latest_checkpoint(self.s.checkpoint_dir)
        if latest:
            self.checkpoint.restore(latest).assert_existing_objects_matched()
            log.info("%s: restored %s (global step %d)", self.ctx.name, latest, int(self.step.numpy()))
        else:
            log.info("%s: no checkpoint in %s: starting from scratch", self.ctx.name, self.s.checkpoint_dir)
        return int(self.step.numpy())


def run(ctx: TaskContext) -> int:
    s = TrainSettings.from_ctx(ctx)
    if not ctx.cluster_spec.get("ps") or not ctx.cluster_spec.get("worker"):
        raise TaskSetupError("parameter-server-strategy needs ps and worker tasks in the cluster spec")
    # As TF's parameter server guide does: a worker that is down fails an RPC at once (then its steps are
    # re-run elsewhere) instead of gRPC waiting for it to come back.
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    started = time.monotonic()
    strategy = tf.distribute.ParameterServerStrategy(tf.distribute.cluster_resolver.TFConfigClusterResolver())
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    log.info("%s: coordinator connected to %d ps and %d workers in %.1f s", ctx.name, ctx.num_ps,
             len(ctx.cluster_spec["worker"]), time.monotonic() - started)
    trainer = PssTrainer(ctx, s, strategy)
    for v in trainer.placed():
        log.info("%s: variable %s (%d bytes) on %s", ctx.name, v.name, v.nbytes, v.device)
    start_step = trainer.restore()
    final_step = train(ctx, s, trainer, coordinator, start_step)
    if final_step is None:
        log.info("%s: stopped by SIGTERM after a checkpoint; not finished", ctx.name)
        return TERMINATED_EXIT
    spec = ctx.cluster_spec
    targets = serving_targets(PS_STRATEGY, spec)
    signalled = signal_done(lambda job, i: f"grpc://{spec[job][i]}", ctx.run_id, ctx.name, targets, None)
    log.info("%s: training done at global step %d; signalled the end to %s", ctx.name, final_step,
             ", ".join(f"{j}:{i}" for j, i in signalled) or "nobody")
    return 0


def train(ctx: TaskContext, s: TrainSettings, trainer: PssTrainer, coordinator: Any, start_step: int) -> int | None:
    """Train to [training] steps; the final global step, or None when SIGTERM ended it early."""
    iterator = iter(coordinator.create_per_worker_dataset(trainer.dataset_fn(start_step)))
    per_step = ps_bytes_per_step(pulled_variables(trainer.placed()))
    telemetry = CoordinatorTelemetry(layout=ctx.layout, summary_every_steps=s.summary_every_steps, host=ctx.host,
                                     job=ctx.job, index=ctx.index, workers=trainer.workers,
                                     batch_size=s.batch_size, interval=s.progress_interval,
                                     ps_bytes_per_step=per_step).start()
    slowed = {f"worker:{k}": f for k, f in enumerate(trainer.factors) if f > 1.0}
    if slowed:
        log.info("%s: stragglers (each step takes N x its own duration): %s", ctx.name, slowed)
    window = IN_FLIGHT_PER_WORKER * trainer.workers
    log.info("%s: training from global step %d to %d: %d steps of %d examples, up to %d in flight",
             ctx.name, start_step, s.steps, max(0, s.steps - start_step), s.batch_size, window)
    t0 = time.monotonic()
    loop = CoordinatorLoop(ctx, s, trainer, coordinator, iterator, telemetry, window)
    try:
        final_step = loop.run(start_step)
    finally:
        telemetry.close()
    took = time.monotonic() - t0
    log.info("%s: %d steps completed in %.1f s (%.1f steps/s); per worker: %s", ctx.name, telemetry.total,
             took, telemetry.total / took if took else 0.0,
             ", ".join(f"worker:{k}={n}" for k, n in enumerate(telemetry.by_worker)))
    return None if loop.terminated else final_step
