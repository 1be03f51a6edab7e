"""The parameter-server-strategy coordinator's loop: schedule steps, count them, checkpoint, survive blips.

- Scheduling: one `ClusterCoordinator.schedule` per global step until [training] steps, at most `window`
  steps in flight; each result ([loss, worker index, global step]) is fetched in order and counted
  (training/tf2/coordinator_telemetry.py); loss summaries every summary_every_steps.
- Checkpoints: when due (training/tf2/settings.py CheckpointClock) and at the end, after every step in flight
  finished and `join()` returned, so a checkpoint holds exactly the updates its step counter counts.
- SIGTERM (the dashboard's restart, a supervisor's stop): no more steps are scheduled, those in flight
  finish, a checkpoint is written, and the loop ends with `terminated` set (the coordinator then exits
  TERMINATED_EXIT, not 0: it did not finish). A restarted coordinator creates new variables on the ps
  tasks (TF2's are the creating coordinator's own) and restores the last checkpoint: after a SIGTERM
  that is where it stopped, nothing lost; after a SIGKILL or a crash, up to a checkpoint interval.
- A finished step whose result was lost with its worker (it died before the coordinator copied the
  result) is counted without a worker; TF re-runs the steps that did not finish on a dead worker itself.
- A ps failure (TF attributes the error to `/job:ps`) ends the loop with the error, and the coordinator
  exits 1 to be restarted, EXCEPT when every ps task still holds its variables (read back from the
  coordinator): then a worker merely could not reach a ps yet. That happens right after a ps restart:
  the workers' gRPC channels to it are still in reconnect backoff (up to tens of seconds), and TF's
  coordinator takes the first failed step for a ps failure. The loop then drops the steps in flight (TF
  cancelled them), waits RETRY_PAUSE_S and schedules again from the ps's step counter, for up to
  TRANSIENT_GRACE_S without a finished step.
"""

from __future__ import annotations

import collections
import logging
import signal
import time
from typing import Any

import tensorflow as tf

from ..run.context import TaskContext
from .coordinator_telemetry import CoordinatorTelemetry
from .settings import CheckpointClock, TrainSettings
from .summaries import write_scalar

log = logging.getLogger("tfcluster.ps_strategy")

PS_ERROR = "remote target /job:ps"  # in every error TF attributes to a ps task (cluster_coordinator.py)
MAX_TO_KEEP = 3
RETRY_PAUSE_S = 1.0
TRANSIENT_GRACE_S = 120.0


class CoordinatorLoop:
    def __init__(self, ctx: TaskContext, s: TrainSettings, trainer: Any, coordinator: Any, iterator: Any,
                 telemetry: CoordinatorTelemetry, window: int) -> None:
        self.ctx = ctx
        self.s = s
        self.trainer = trainer  # training/tf2/ps_strategy.py PssTrainer
        self.coordinator = coordinator
        self.iterator = iterator
        self.telemetry = telemetry
        self.window = window
        self.manager = tf.train.CheckpointManager(trainer.checkpoint, s.checkpoint_dir, max_to_keep=MAX_TO_KEEP)
        self.writer = tf.summary.create_file_writer(s.checkpoint_dir)
        self.pending: collections.deque[Any] = collections.deque()
        self.global_step = 0
        self.last_progress = time.monotonic()
        self.terminated = False  # SIGTERM: checkpoint what is done, then end without finishing

    def run(self, start_step: int) -> int:
        """Train from `start_step` to [training] steps; returns the global step at the end."""
        self.global_step = start_step
        clock = CheckpointClock(self.s.checkpoint_every_steps, self.s.checkpoint_every_secs)
        clock.saved(start_step)
        previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        try:
            while True:
                try:
                    self._steps(clock)
                    break
                except tf.errors.UnavailableError as e:
                    if not self._transient(e):
                        raise
        finally:
            signal.signal(signal.SIGTERM, previous)
            self.writer.close()
        return int(self.trainer.step.numpy())

    def _on_sigterm(self, signum: int, frame: object) -> None:
        log.info("%s: SIGTERM: finishing the steps in flight and checkpointing before exiting", self.ctx.name)
        self.terminated = True

    def _steps(self, clock: CheckpointClock) -> None:
        to_schedule = max(0, self.s.steps - int(self.trainer.step.numpy()))
        while to_schedule or self.pending:
            if self.terminated:
                to_schedule = 0  # drain what is in flight: the last one out writes the checkpoint
            while to_schedule and len(self.pending) < self.window:
                self.pending.append(self.coordinator.schedule(self.trainer.train_step, args=(self.iterator,)))
                to_schedule -= 1
            self._complete(self.pending.popleft())
            if clock.due(self.global_step) or not (to_schedule or self.pending):
                while self.pending:
                    self._complete(self.pending.popleft())
                self.coordinator.join()
                path = self.manager.save(checkpoint_number=int(self.trainer.step.numpy()))
                clock.saved(self.global_step)
                log.info("%s: checkpoint %s", self.ctx.name, path)

    def _complete(self, remote: Any) -> None:
        try:
            loss, worker, step = remote.fetch()
        except tf.errors.OpError as e:
            if PS_ERROR in str(e):
                raise
            # A step that really failed makes the next schedule() or join() raise: this one ran.
            log.warning("%s: lost the result of a finished step (%s): counted without its worker",
                        self.ctx.name, type(e).__name__)
            self.telemetry.completed(-1, self.global_step, float("nan"))
            return
        self.last_progress = time.monotonic()
        self.telemetry.completed(int(worker), int(step), float(loss))
        if int(step) // self.s.summary_every_steps > self.global_step // self.s.summary_every_steps:
            write_scalar(self.writer, "loss", float(loss), int(step))
        self.global_step = max(self.global_step, int(step))

    def _transient(self, error: Exception) -> bool:
        """True (after a pause) when the ps tasks still hold the variables: schedule again."""
        if time.monotonic() - self.last_progress > TRANSIENT_GRACE_S or not self.trainer.ps_tasks_hold_variables():
            return False
        log.warning("%s: a worker could not reach a ps task, which still holds its variables (a channel "
                    "reconnecting?): scheduling again. %s", self.ctx.name, str(error).splitlines()[0])
        self.pending.clear()  # TF cancelled them
        time.sleep(RETRY_PAUSE_S)
        return True
