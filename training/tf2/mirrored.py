"""`mode = "multi-worker-mirrored"`: every `worker` (and the `chief`) task runs this trainer with
tf.distribute.MultiWorkerMirroredStrategy, a custom loop and no Keras.

- Cluster: TF_CONFIG from the plan (TFConfigClusterResolver); one replica per GPU the task sees (the strategy
  takes every visible local GPU: the plan gives a task all of its host's GPUs unless gpus_per_task says
  otherwise, each task as many), else one on its CPU.
- Step (ring all-reduce on CPUs, NCCL on GPUs): each replica draws its own batch of [training] batch_size
  (stateless, keyed by seed, the replica's id in the cluster and the global step: training/tf2/models.py),
  computes its gradients of the loss averaged over the GLOBAL batch (batch_size x replicas), all-reduces
  them (SUM, ring collectives) and applies the same update on every replica (training/tf2/optimizer.py);
  the global step is a mirrored int64 variable. [training] steps counts global steps.
- Checkpoints (tf.train.CheckpointManager: step, model, optimizer slots): the chief (the `chief` task, else
  worker 0) writes RunLayout.checkpoints(checkpoint_dir); every other task saves too, into a temporary
  directory of its run dir (<run>/tmp/) it deletes right away (TF's multi-worker docs: saving may involve collectives, so every task must
  take part). Every task saves at the same step: the "checkpoint due" flag of each task (steps or seconds)
  travels with the gradients' all-reduce. At start the chief restores the latest checkpoint and every
  variable is then broadcast from the chief (an all-reduce where the others contribute zeros), so a
  restarted group resumes from the chief's checkpoint even when the others cannot read its disk.
- Summaries: `loss` on the chief every summary_every_steps, next to the checkpoints.
- Failure: a dead peer makes the others' next collective fail: TF's coordination service (on by default
  in TF 2.21) notices the missing heartbeats and aborts the collectives, and every collective also has
  a timeout (COLLECTIVE_TIMEOUT_S), so survivors raise instead of hanging and exit 1. Their supervisors
  then restart the whole group, which resumes from the last checkpoint (training/supervisor.py policy).
- Telemetry: progress events (training/telemetry/writer.py) per task: local steps, the global step,
  examples (local steps x batch_size x its replicas), its first replica's own loss; no `ps_bytes` (there
  is no PS).
- Slowdown: a slowed task sleeps (factor - 1) x its own step time after each step, that time measured once
  over its first unpaced steps (training/cluster/straggler.py BaselinePacer); the collectives make the
  whole group wait for it.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import time
from typing import Any

import tensorflow as tf

from ..cluster.straggler import BaselinePacer
from ..models.sizes import VariableShape
from ..run.context import TaskContext, TaskSetupError
from ..telemetry.task_summaries import TaskSummaries
from ..telemetry.writer import ProgressReporter
from .models import Tf2Model, get_tf2_model
from .optimizer import PlainOptimizer
from .settings import CheckpointClock, TrainSettings
from .summaries import write_scalar

log = logging.getLogger("tfcluster.mirrored")

# Bound on every collective: a step waits for the slowest task (a checkpoint on the chief, a straggler),
# so this is far above a step, and far below "forever" when a peer is gone.
COLLECTIVE_TIMEOUT_S = float(os.environ.get("TFCLUSTER_COLLECTIVE_TIMEOUT", "60"))
MAX_TO_KEEP = 3


def make_strategy() -> tf.distribute.MultiWorkerMirroredStrategy:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    options = tf.distribute.experimental.CommunicationOptions(
        timeout_seconds=COLLECTIVE_TIMEOUT_S,
        # RING on CPUs, NCCL when the task has its GPU
        implementation=tf.distribute.experimental.CommunicationImplementation.AUTO,
    )
    return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver, communication_options=options)


class MirroredTrainer:
    def __init__(self, ctx: TaskContext, settings: TrainSettings, strategy: tf.distribute.Strategy) -> None:
        self.ctx = ctx
        self.s = settings
        self.strategy = strategy
        self.workers = strategy.num_replicas_in_sync  # replicas of the whole cluster
        self.local_replicas = len(strategy.extended.worker_devices)  # this task's: its GPUs, or its CPU
        try:
            self.model: Tf2Model = get_tf2_model(settings.model, settings.model_args)
            self.optimizer = PlainOptimizer(settings.optimizer, settings.learning_rate)
        except ValueError as e:
            raise TaskSetupError(f"[training] {e}") from e
        with strategy.scope():
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            self.model.build(self._variable, settings.seed)
            self.optimizer.build(strategy, self.model.weights)
        self.checkpoint = tf.train.Checkpoint(step=self.step, model=self.model, optimizer=self.optimizer)
        self.train_step = tf.function(self._step_fn)
        self._broadcast = tf.function(self._broadcast_fn)

    @staticmethod
    def _variable(shape: VariableShape, initial: Any) -> tf.Variable:
        return tf.Variable(initial, name=shape.name)

    def all_variables(self) -> list[tf.Variable]:
        return [self.step, *self.model.weights, *self.optimizer.slot_variables()]

    # -- tf.functions -------------------------------------------------------------------------------
    def _step_fn(self, due: tf.Tensor) -> tuple[Any, Any, Any]:
        global_batch = self.s.batch_size * self.workers

        def replica_fn(due_flag: tf.Tensor) -> tuple[list[Any], tf.Tensor, tf.Tensor]:
            shard = tf.distribute.get_replica_context().replica_id_in_sync_group  # the task id with one replica
            features, labels = self.model.batch(self.s.batch_size, self.s.seed, shard, self.step.read_value())
            with tf.GradientTape() as tape:
                per_example = self.model.per_example_loss(features, labels)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            grads = tape.gradient(loss, self.model.weights)
            # One all-reduce carries the gradients and every task's "checkpoint due" flag (copied by identity
            # onto this replica's device: the argument itself has none, and all_reduce needs one).
            reduced = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM,
                                                                     [*grads, tf.identity(due_flag)])
            return reduced[:-1], tf.reduce_mean(per_example), reduced[-1]

        grads, loss, due_sum = self.strategy.run(replica_fn, args=(due,))
        with tf.control_dependencies(self.optimizer.apply(self.strategy, grads, self.model.weights)):
            self.strategy.extended.update(self.step, lambda v: v.assign_add(1), group=True)
        return self._local(loss), self._local(due_sum), self._local(self.step.read_value())

    def _broadcast_fn(self, is_chief: tf.Tensor) -> None:
        """Every variable takes the chief's value: all-reduce (SUM) of the value of the chief's first replica
        and zeros."""
        variables = self.all_variables()
        local_replicas = self.local_replicas

        def replica_fn(chief: tf.Tensor) -> list[tf.Tensor]:
            first = tf.equal(tf.math.floormod(tf.distribute.get_replica_context().replica_id_in_sync_group,
                                              local_replicas), 0)
            source = tf.logical_and(chief, first)
            mine = [tf.where(source, v.read_value(), tf.zeros_like(v.read_value())) for v in variables]
            out: list[Any] = [None] * len(mine)
            for dtype in {t.dtype for t in mine}:  # one batched all-reduce per dtype (they are concatenated)
                picked = [i for i, t in enumerate(mine) if t.dtype == dtype]
                summed = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM,
                                                                        [mine[i] for i in picked])
                for i, value in zip(picked, summed, strict=True):
                    out[i] = value
            return out

        values = self.strategy.run(replica_fn, args=(is_chief,))
        for var, value in zip(variables, values, strict=True):
            self.strategy.extended.update(var, lambda v, x: v.assign(x), args=(value,), group=True)

    def _local(self, value: Any) -> Any:
        return self.strategy.experimental_local_results(value)[0]

    # -- checkpoints --------------------------------------------------------------------------------
    def restore(self) -> int:
        """Chief: restore the latest checkpoint; then everyone takes the chief's values. Returns the step."""
        if self.ctx.is_chief:
            latest = tf.train.latest_checkpoint(self.s.checkpoint_dir)
            if latest:
                self.checkpoint.restore(latest).assert_existing_objects_matched()
                log.info("%s: restored %s (global step %d)", self.ctx.name, latest, int(self.step.numpy()))
            else:
                log.info("%s: no checkpoint in %s: starting from scratch", self.ctx.name, self.s.checkpoint_dir)
        self._broadcast(tf.constant(self.ctx.is_chief))
        return int(self.step.numpy())


def run(ctx: TaskContext) -> int:
    settings = TrainSettings.from_ctx(ctx)
    started = time.monotonic()
    strategy = make_strategy()
    # TF's coordination service installs a preemption notifier that swallows SIGTERM: the task would train
    # on and its group would stall at the next collective. SIGTERM is how a restart is asked for (the
    # dashboard's `r`): end at once, as any task does; the group restarts from the last checkpoint.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    log.info("%s: MultiWorkerMirroredStrategy ready in %.1f s: %d replicas in sync, chief=%s, collective "
             "timeout %g s", ctx.name, time.monotonic() - started, strategy.num_replicas_in_sync, ctx.is_chief,
             COLLECTIVE_TIMEOUT_S)
    trainer = MirroredTrainer(ctx, settings, strategy)
    global_step = trainer.restore()
    return train(ctx, settings, trainer, global_step)


def train(ctx: TaskContext, s: TrainSettings, trainer: MirroredTrainer, global_step: int) -> int:
    write_dir = s.checkpoint_dir if ctx.is_chief else _scratch_dir(ctx)
    manager = tf.train.CheckpointManager(trainer.checkpoint, write_dir, max_to_keep=MAX_TO_KEEP)
    writer = tf.summary.create_file_writer(s.checkpoint_dir) if ctx.is_chief else None
    clock = CheckpointClock(s.checkpoint_every_steps, s.checkpoint_every_secs)
    clock.saved(global_step)
    slowdown = s.slowdown_of(ctx.job, ctx.index)
    pacer = BaselinePacer(slowdown)
    if slowdown > 1.0:
        log.info("%s: straggler: each step takes %gx its own duration (measured over its first %d steps)",
                 ctx.name, slowdown, pacer.calibration_steps + 1)
    reporter = ProgressReporter(ctx.events_file, host=ctx.host, job=ctx.job, task=ctx.index,
                                interval=s.progress_interval,
                                summaries=TaskSummaries(ctx.summaries_dir, s.summary_every_steps)).start()
    local_step = 0
    log.info("%s: training from global step %d to %d, %d examples per replica and step, %d replica(s) here "
             "(global batch %d)", ctx.name, global_step, s.steps, s.batch_size, trainer.local_replicas,
             s.batch_size * trainer.workers)
    try:
        while global_step < s.steps:
            t0 = time.perf_counter()
            due = 1.0 if clock.due_by_time() else 0.0  # all-reduced: every task saves at the same step
            loss_t, due_t, step_t = trainer.train_step(tf.constant(due))
            loss, global_step = float(loss_t.numpy()), int(step_t.numpy())
            took = time.perf_counter() - t0  # the step alone, not a checkpoint saved after it
            local_step += 1
            reporter.record(local_step, global_step, local_step * s.batch_size * trainer.local_replicas, loss)
            if writer is not None and global_step % s.summary_every_steps == 0:
                write_scalar(writer, "loss", loss, global_step)
            if float(due_t.numpy()) > 0 or clock.due_by_steps(global_step):
                _save(ctx, manager, global_step, write_dir)
                clock.saved(global_step)
            if delay := pacer.delay_s(took):
                time.sleep(delay)
        if clock.last_step != global_step:  # the same decision on every task: the step is the group's
            _save(ctx, manager, global_step, write_dir)
    finally:
        reporter.close()
        if writer is not None:
            writer.close()
        if not ctx.is_chief:
            shutil.rmtree(write_dir, ignore_errors=True)
    log.info("%s: training done at global step %d (%d steps in this process)", ctx.name, global_step, local_step)
    return 0


def _scratch_dir(ctx: TaskContext) -> str:
    """Where a non-chief task's share of each checkpoint goes (deleted after every save): its own run dir."""
    parent = os.path.join(ctx.layout.root, "tmp")
    os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"checkpoint-{ctx.job}{ctx.index}-", dir=parent)


def _save(ctx: TaskContext, manager: tf.train.CheckpointManager, global_step: int, write_dir: str) -> None:
    path = manager.save(checkpoint_number=global_step)
    if ctx.is_chief:
        log.info("%s: checkpoint %s", ctx.name, path)
    else:  # only taking part: the chief's copy is the checkpoint
        shutil.rmtree(write_dir, ignore_errors=True)
