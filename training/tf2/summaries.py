"""TensorBoard scalars without the `tensorboard` package.

`tf.summary.scalar` lives in tensorboard, which `tensorflow-cpu` 2.21 does not install (TBNotInstalledError).
`tf.summary.write` is TensorFlow's own op; with the "scalars" plugin metadata TensorBoard shows the value
exactly as a `tf.summary.scalar` one.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

_SCALAR_METADATA = tf.compat.v1.SummaryMetadata(
    plugin_data=tf.compat.v1.SummaryMetadata.PluginData(plugin_name="scalars"))


def write_scalar(writer: Any, name: str, value: float, step: int) -> None:
    with writer.as_default():
        tf.summary.write(name, tf.constant(float(value), tf.float32), step=step, metadata=_SCALAR_METADATA)
