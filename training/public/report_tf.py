"""A Keras callback and a tf.compat.v1 SessionRunHook that call `report()` (training/public/report.py).

TensorFlow is imported only when one of the classes is first asked for (`tf_class(name)`, which the
`tfcluster_report` module's `__getattr__` calls), so `import tfcluster_report` stays stdlib-only.

- `TfclusterCallback(batch_size=None)`: `model.fit(..., callbacks=[TfclusterCallback(batch_size=64)])`.
  After every training batch (or every `steps_per_execution` batches): `report(step=` batches done by
  this process so far `, loss=logs["loss"], examples=` batch_size times the batches since the last call
  when batch_size is given `)`. Keras' `loss` in logs is the epoch's running mean, as its bar shows.
- `TfclusterHook(loss=None, batch_size=None)`: `MonitoredTrainingSession(hooks=[TfclusterHook(loss)])`.
  After every `run()` of the session: one step, the global step (fetched with the run, so as the run
  began) and the loss tensor's value when one was given.
"""

from __future__ import annotations

from typing import Any

from .report import current_step, report

_built: dict[str, type] = {}


def tf_class(name: str) -> type:
    """`TfclusterCallback` or `TfclusterHook`, built on first use (imports TensorFlow)."""
    if name not in _built:
        builders = {"TfclusterCallback": _callback_class, "TfclusterHook": _hook_class}
        if name not in builders:
            raise AttributeError(name)
        _built[name] = builders[name]()
    return _built[name]


def _callback_class() -> type:
    import tensorflow as tf

    class TfclusterCallback(tf.keras.callbacks.Callback):  # type: ignore[misc]
        """Reports every training batch's progress to tfcluster (see training/public/report_tf.py)."""

        def __init__(self, batch_size: int | None = None) -> None:
            super().__init__()
            self.batch_size = batch_size
            self._seen_in_epoch = 0  # batches of the current epoch already reported

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self._seen_in_epoch = 0

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            done = int(batch) + 1
            new = max(done - self._seen_in_epoch, 0)
            self._seen_in_epoch = done
            loss = (logs or {}).get("loss")
            report(step=current_step() + new, loss=loss,
                   examples=self.batch_size * new if self.batch_size else None)

    return TfclusterCallback


def _hook_class() -> type:
    import tensorflow as tf

    v1 = tf.compat.v1

    class TfclusterHook(v1.train.SessionRunHook):  # type: ignore[misc, name-defined]
        """Reports every session run's progress to tfcluster (see training/public/report_tf.py)."""

        def __init__(self, loss: Any = None, batch_size: int | None = None) -> None:
            self.loss = loss
            self.batch_size = batch_size
            self._fetches: dict[str, Any] = {}

        def begin(self) -> None:
            self._fetches = {}
            global_step = v1.train.get_global_step()
            if global_step is not None:
                self._fetches["global_step"] = global_step
            if self.loss is not None:
                self._fetches["loss"] = self.loss

        def before_run(self, run_context: Any) -> Any:
            return v1.train.SessionRunArgs(self._fetches)

        def after_run(self, run_context: Any, run_values: Any) -> None:
            results = run_values.results or {}
            report(loss=results.get("loss"), global_step=results.get("global_step"), examples=self.batch_size)

    return TfclusterHook
