"""Between-graph replication: one client per worker task, each with its own graph and training loop.

Each worker (and the chief) builds its own input pipeline, model, loss and optimizer; the variables and
the global step live on the PS tasks (greedy by bytes, training/cluster/devices.py), compute on the task's own
device from the plan. Asynchronous updates by default; `sync_replicas = true` wraps the optimizer in
SyncReplicasOptimizer.

- Sessions: a MonitoredSession on this task's own server, with `device_filters` naming the ps job and
  this task only (without them a non-chief worker was seen to hang once the chief had exited).
- The chief alone initialises (or restores from the latest checkpoint: only when the ps tasks lost their
  variables, training/graph/checkpointing.py), checkpoints (by steps or time) and writes summaries.
  Checkpoints: by default a NON-sharded Saver pinned to the chief's CPU, so the whole checkpoint is written
  on the chief's machine (RunLayout.checkpoints(checkpoint_dir)); with `shared_checkpoint_dir = true` the
  default sharded saver has every PS write its own shard into `checkpoint_dir`, which must then be one
  filesystem shared by every machine (an absolute path). Either way a PS that restarts loses its
  variables: the sessions fail over (MonitoredSession recovers from Aborted/Unavailable) and the chief's
  new session restores them from the latest checkpoint.
- A worker that (re)starts later simply joins: the global step lives on the PS. In a resized run (`tfcluster
  resize`, asynchronous only) every training task that starts joins through ClusterSpec propagation, its
  sessions carrying the current cluster, so a ps that started without it reaches it and nobody restarts
  (training/cluster/joining.py); the ps tasks then wait for the finishers of the current plan
  (training/cluster/ps.py FinisherWatch). A synchronous run cannot take a worker so: its accumulators and
  token queue on the ps are sized for the old count. Its resize restarts every task that stays, the ps too
  (orchestrator/run/resize_restart.py): fresh accumulators, replicas_to_aggregate of the new count, and
  the chief, finding the new ps empty, restores the latest checkpoint.
- Sync: replicas_to_aggregate (default: the training tasks minus backup_workers: run/roles.py) gradients make one
  update; `total_num_replicas` is the number of training tasks. No initial tokens (num_tokens=0), so all
  replicas advance in lock step and none is left waiting on the token queue after the last update; the
  chief's aggregation thread, still waiting for gradients that will never come, is abandoned after a short
  grace period instead of the default two minutes.
- At the end each task signals the PS done queues (training/cluster/ps.py) and returns 0.
- Slowdown: `slowdown = {"worker:1" = 4.0}` sleeps (N-1) x the step's own duration after each step, that
  duration measured once over its first unpaced steps (training/cluster/straggler.py BaselinePacer).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any

import tensorflow as tf

from ..cluster.devices import (
    bytes_per_ps,
    placed_variables,
    placement_lines,
    pulled_variables,
    variable_setter,
)
from ..cluster.joining import start_server
from ..cluster.optimizers import make_optimizer
from ..cluster.ps import serving_targets, signal_done
from ..cluster.straggler import BaselinePacer, slowdown_factor
from ..models import get_model
from ..run.context import TaskContext, TaskSetupError
from ..run.roles import sync_aggregate
from ..telemetry.accounting import ps_bytes_per_step
from ..telemetry.task_summaries import TaskSummaries
from ..telemetry.writer import ProgressReporter
from .checkpointing import ResumingChiefSessionCreator, checkpoint_hook

v1 = tf.compat.v1
log = logging.getLogger("tfcluster.between_graph")

RECOVERY_WAIT_SECS = 1.0  # TF's default (30 s) makes a worker that starts before the chief idle for 30 s
STOP_GRACE_SECS = 5
WARMUP_STEPS = 10  # steps excluded from the logged throughput (graph warm-up, placement logging)
# Sync chief: after the last update its aggregation thread waits for gradients that never come; only a
# session close ends it, so do not give it TF's default two minutes.
SYNC_STOP_GRACE_SECS = 1


class WorkerSessionCreator(v1.train.WorkerSessionCreator):  # type: ignore[misc,name-defined]
    """TF's WorkerSessionCreator, polling for the chief's initialisation every second instead of every 30."""

    _session_manager: Any

    def _get_session_manager(self) -> Any:
        if self._session_manager is None:
            self._session_manager = v1.train.SessionManager(
                local_init_op=self._scaffold.local_init_op,
                local_init_feed_dict=self._scaffold.local_init_feed_dict,
                ready_op=self._scaffold.ready_op,
                ready_for_local_init_op=self._scaffold.ready_for_local_init_op,
                graph=v1.get_default_graph(),
                recovery_wait_secs=RECOVERY_WAIT_SECS,
            )
        return self._session_manager


class SessionLogHook(v1.train.SessionRunHook):  # type: ignore[misc,name-defined]
    """Logs the global step each time a session is (re)created: after a PS restart the session fails
    over and the chief restores the latest checkpoint, which shows here as the step it resumed from."""

    def __init__(self, name: str, global_step: Any) -> None:
        self.name = name
        self.global_step = global_step
        self.sessions = 0

    def after_create_session(self, session: Any, coord: Any) -> None:
        self.sessions += 1
        step = int(session.run(self.global_step))
        what = "session ready" if self.sessions == 1 else "session re-created (a task of the cluster restarted)"
        log.info("%s: %s at global step %d", self.name, what, step)


def training_tasks(ctx: TaskContext) -> list[str]:
    return [f"{job}:{i}" for job in ("chief", "worker") for i in ctx.tasks_of(job)]


def sync_settings(ctx: TaskContext) -> tuple[int, int]:
    """(replicas_to_aggregate, total_num_replicas) for SyncReplicasOptimizer."""
    total = len(training_tasks(ctx))
    return sync_aggregate(ctx.training, total), total


def run(ctx: TaskContext) -> int:  # noqa: PLR0912, PLR0915 - the graph, the session and the loop, top to bottom
    tr = ctx.training
    own = f"/job:{ctx.job}/task:{ctx.index}"
    task_server = start_server(ctx, ["/job:ps", own])
    server, master = task_server.server, task_server.master
    config = task_server.config(["/job:ps", own])
    log.info("%s: server at %s, chief=%s, compute on %s", ctx.name, server.target, ctx.is_chief, ctx.device)
    if task_server.joins:
        log.info("%s: joins the resized cluster: its sessions (master %s) carry the cluster %s", ctx.name, master,
                 json.dumps(task_server.cluster, sort_keys=True))

    batch_size = int(tr.get("batch_size", 128))
    steps = int(tr.get("steps", 1000))
    sync = bool(tr.get("sync_replicas", False))
    try:
        model = get_model(str(tr.get("model", "mlp")), tr.get("model_args") or {})
    except ValueError as e:  # unknown model, or the user's module cannot be imported: one line, exit 2
        raise TaskSetupError(f"[training] model: {e}") from e

    setter, _strategy = variable_setter(ctx.cluster_spec, ctx.device)
    with v1.device(setter):
        global_step = v1.train.get_or_create_global_step()
        features, labels = model.input_fn(batch_size, int(tr.get("seed", 0)))
        loss = model.loss(features, labels)
        optimizer = make_optimizer(str(tr.get("optimizer", "sgd")), float(tr.get("learning_rate", 0.05)))
        sync_hook = None
        if sync:
            aggregate, total = sync_settings(ctx)
            optimizer = v1.train.SyncReplicasOptimizer(optimizer, replicas_to_aggregate=aggregate,
                                                       total_num_replicas=total)
            sync_hook = optimizer.make_session_run_hook(ctx.is_chief, num_tokens=0)
            log.info("%s: synchronous: %d of %d replicas' gradients per update", ctx.name, aggregate, total)
        train_op = optimizer.minimize(loss, global_step=global_step)
        with tf.control_dependencies([train_op]):
            step_after = tf.identity(global_step.read_value(), name="step_after")  # this step's update included
    v1.summary.scalar("loss", loss)

    variables = placed_variables()
    for line in placement_lines(variables, {f"{ctx.name} (loss)": loss.device}):
        log.info("%s: %s", ctx.name, line)
    log.info("%s: bytes per ps task: %s", ctx.name, bytes_per_ps(variables))

    scaffold, checkpoint_dir = _checkpointing(ctx, own)
    hooks: list[Any] = [v1.train.StopAtStepHook(last_step=steps), SessionLogHook(ctx.name, global_step)]
    if sync_hook is not None:
        hooks.append(sync_hook)
    if ctx.is_chief:
        hooks.extend(_chief_hooks(ctx, scaffold, checkpoint_dir, sync))
        creator: Any = ResumingChiefSessionCreator(scaffold=scaffold, master=master, config=config,
                                                   checkpoint_dir=checkpoint_dir)
    else:
        creator = WorkerSessionCreator(scaffold=scaffold, master=master, config=config)

    # TFCLUSTER_TELEMETRY=0 turns the progress events off: only for measuring their overhead (benchmarks/).
    telemetry = os.environ.get("TFCLUSTER_TELEMETRY", "1") != "0"
    reporter = ProgressReporter(
        ctx.events_file, host=ctx.host, job=ctx.job, task=ctx.index,
        interval=float(tr.get("progress_interval", 1.0)),
        ps_bytes_per_step=ps_bytes_per_step(pulled_variables(variables)),
        summaries=TaskSummaries(ctx.summaries_dir, int(tr.get("summary_every_steps", 100))),
    )
    slowdown = slowdown_factor(tr.get("slowdown") or {}, ctx.job, ctx.index)
    pacer = BaselinePacer(slowdown)
    if slowdown > 1.0:
        log.info("%s: straggler: each step takes %gx its own duration (measured over its first %d steps)",
                 ctx.name, slowdown, pacer.calibration_steps + 1)
    local_step = examples = 0
    last_global = 0
    fetches = [step_after, loss]
    if sync and ctx.is_chief:
        _quiet_cancelled_aggregation_thread()
    if telemetry:
        reporter.start()
    warm_at: float | None = None  # the loop's own throughput, measured after the warm-up steps
    loop_end = 0.0
    # Benchmarks only (benchmarks/bench_telemetry.py): the wall time of every step, written at the end, so
    # two runs side by side can be compared over exactly the same time window.
    step_times_path = os.environ.get("TFCLUSTER_STEP_TIMES")
    step_times: list[float] | None = [] if step_times_path else None
    try:
        with v1.train.MonitoredSession(session_creator=creator, hooks=hooks,
                                       stop_grace_period_secs=SYNC_STOP_GRACE_SECS if sync else STOP_GRACE_SECS
                                       ) as sess:
            while not sess.should_stop():
                started = time.perf_counter()
                if local_step == 0:  # the first step reports where the runtime really placed every node
                    metadata = v1.RunMetadata()
                    last_global, loss_value = sess.run(fetches, options=v1.RunOptions(output_partition_graphs=True),
                                                       run_metadata=metadata)
                    _log_landed(ctx, metadata, variables, loss)
                else:
                    last_global, loss_value = sess.run(fetches)
                took = time.perf_counter() - started
                local_step += 1
                examples += batch_size
                if telemetry:
                    reporter.record(local_step, int(last_global), examples, float(loss_value))
                if local_step == WARMUP_STEPS:
                    warm_at = time.perf_counter()
                # A step's time includes any session recovery MonitoredSession made inside it (a PS
                # restarted): a multiple of that would stall the worker for a multiple of the outage.
                if delay := pacer.delay_s(took):
                    time.sleep(delay)
                loop_end = time.perf_counter()
                if step_times is not None:
                    step_times.append(time.time())
    finally:
        reporter.close()
    log.info("%s: training done: %d local steps, last global step seen %d", ctx.name, local_step, last_global)
    if warm_at is not None and local_step > WARMUP_STEPS:
        loop_s = loop_end - warm_at
        log.info("%s: throughput: %d steps in %.3f s after warm-up (%.2f steps/s, telemetry %s)", ctx.name,
                 local_step - WARMUP_STEPS, loop_s, (local_step - WARMUP_STEPS) / loop_s, "on" if telemetry else "off")
    if step_times_path and step_times is not None:
        with open(step_times_path, "w", encoding="utf-8") as f:
            json.dump(step_times, f)
    signalled = signal_done(lambda *_: master, ctx.run_id, ctx.name, serving_targets(ctx.mode, ctx.cluster_spec), own,
                            cluster=task_server.cluster)
    log.info("%s: signalled the end of training to %s", ctx.name, ", ".join(f"{j}:{i}" for j, i in signalled))
    return 0


def _log_landed(ctx: TaskContext, metadata: Any, variables: list[Any], loss: tf.Tensor) -> None:
    """Log the device each variable and this task's tower actually landed on (after soft placement)."""
    assigned = {node.name: node.device for graph in metadata.partition_graphs for node in graph.node}
    log.info("%s: tower %s landed on %s", ctx.name, ctx.name, assigned.get(loss.op.name, "?"))
    for var in variables:
        log.info("%s: variable %s landed on %s", ctx.name, var.name, assigned.get(var.name, "?"))


def _quiet_cancelled_aggregation_thread() -> None:
    """The sync chief's aggregation thread ends with CancelledError when the session closes: expected."""
    previous = threading.excepthook

    def hook(args: Any) -> None:
        if args.exc_type is not None and issubclass(args.exc_type, tf.errors.CancelledError):
            log.info("sync aggregation thread stopped at the end of training")
            return
        previous(args)

    threading.excepthook = hook


def _checkpointing(ctx: TaskContext, own: str) -> tuple[Any, str | None]:
    """(scaffold, checkpoint dir for the chief / None for the others)."""
    tr = ctx.training
    checkpoint_dir = ctx.layout.checkpoints(str(tr.get("checkpoint_dir", "checkpoints")))
    if bool(tr.get("shared_checkpoint_dir", False)):
        # Sharded, as Scaffold's default saver: each PS writes its own shard into this shared directory.
        scaffold = v1.train.Scaffold(saver=v1.train.Saver(sharded=True, allow_empty=True, save_relative_paths=True))
        log.info("%s: sharded checkpoints in the shared directory %s", ctx.name, checkpoint_dir)
        if not os.path.isabs(str(tr.get("checkpoint_dir", ""))):
            log.warning("%s: shared_checkpoint_dir is set but checkpoint_dir is relative: every PS writes its "
                        "shard under its own run dir, which is only one directory on a shared filesystem",
                        ctx.name)
    else:
        # Pinned to this task's CPU: SaveV2/RestoreV2 run in the chief's process, on the chief's disk.
        with tf.device(f"{own}/device:CPU:0"):
            # Relative paths in the `checkpoint` file: a copy of the directory (pull) restores on its own.
            saver = v1.train.Saver(sharded=False, max_to_keep=3, save_relative_paths=True)
        scaffold = v1.train.Scaffold(saver=saver)
        if ctx.is_chief:
            log.info("%s: whole checkpoints written by the chief in %s", ctx.name, checkpoint_dir)
    return scaffold, (checkpoint_dir if ctx.is_chief else None)


def _chief_hooks(ctx: TaskContext, scaffold: Any, checkpoint_dir: str | None, sync: bool) -> list[Any]:
    tr = ctx.training
    summary_steps = int(tr.get("summary_every_steps", 100))
    hooks = [
        # end() writes a final checkpoint at the last step.
        checkpoint_hook(str(checkpoint_dir), scaffold, tr.get("checkpoint_every_steps"),
                        tr.get("checkpoint_every_secs")),
        v1.train.SummarySaverHook(save_steps=summary_steps, output_dir=checkpoint_dir, scaffold=scaffold),
    ]
    if not sync:  # in sync mode the chief's own steps do not always move the global step: it would warn
        hooks.append(v1.train.StepCounterHook(every_n_steps=summary_steps, output_dir=checkpoint_dir))
    return hooks
