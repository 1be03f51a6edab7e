"""Checkpoints and sessions for the graph-mode trainers (between-graph chief, in-graph client).

- **Never lose more than the parameter servers lost.** A chief (or in-graph client) that (re)starts
  first asks the ps tasks whether they still hold initialised variables (`ResumingChiefSessionCreator`):
  if they do (only the chief died), it joins them as they are, so the global step never goes back. Only
  when a ps lost its state (or nothing was ever initialised) does it restore the latest checkpoint, or
  initialise, as TensorFlow's own chief does; every task then resumes from that checkpoint.
- **Checkpoints by steps and by time, whichever comes first** (`StepsOrSecsTimer`): TensorFlow's hooks
  take one or the other; a ps lost early in a run should cost few steps, a slow run should still save.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import tensorflow as tf

v1 = tf.compat.v1
log = logging.getLogger("tfcluster.checkpointing")


class StepsOrSecsTimer(v1.train.SecondOrStepTimer):  # type: ignore[misc,name-defined]  # TF ships no types
    """Triggers every `every_steps` global steps or every `every_secs` seconds, whichever comes first."""

    def __init__(self, every_steps: int | None, every_secs: float | None) -> None:
        if every_steps:
            super().__init__(every_steps=every_steps)
        else:
            super().__init__(every_secs=every_secs)
        self._steps = every_steps
        self._secs = every_secs

    def should_trigger_for_step(self, step: int) -> bool:
        if self._last_triggered_step is None:
            return True
        if self._last_triggered_step == step:
            return False
        if self._steps and step >= self._last_triggered_step + self._steps:
            return True
        return bool(self._secs) and time.time() >= self._last_triggered_time + self._secs


def checkpoint_hook(checkpoint_dir: str, scaffold: Any, every_steps: int | None,
                    every_secs: float | None) -> Any:
    """TensorFlow's CheckpointSaverHook on our timer; its end() still writes the final checkpoint."""
    hook = v1.train.CheckpointSaverHook(checkpoint_dir, save_steps=every_steps or None,
                                        save_secs=None if every_steps else every_secs, scaffold=scaffold)
    hook._timer = StepsOrSecsTimer(every_steps, every_secs)  # (a private attribute, stable since TF 1.x)
    return hook


class ResumingChiefSessionCreator(v1.train.ChiefSessionCreator):  # type: ignore[misc,name-defined]
    """TensorFlow's ChiefSessionCreator, except that variables the ps tasks still hold win over the
    latest checkpoint (see the module docstring)."""

    def create_session(self) -> Any:
        self._scaffold.finalize()
        manager = self._get_session_manager()
        try:
            # Ready already (every variable initialised on the ps): join the live cluster as it is.
            sess = manager.wait_for_session(self._master, config=self._config, max_wait_secs=0)
        except tf.errors.DeadlineExceededError:
            log.info("the parameter servers hold no initialised variables: restoring the latest checkpoint "
                     "(or initialising)")
            return super().create_session()
        log.info("the parameter servers still hold the variables: resuming from them, not from a checkpoint")
        return sess
