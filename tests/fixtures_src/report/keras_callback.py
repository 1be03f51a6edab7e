"""Keras 3 Model.fit reporting through tfcluster_report.TfclusterCallback."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import tensorflow as tf
import tfcluster_report

BATCH = 32


class Slow(tf.keras.callbacks.Callback):  # type: ignore[misc]
    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        time.sleep(0.005)  # ~1.5 s per epoch in all: several progress intervals


def main() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3200, 8)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(x, y, batch_size=BATCH, epochs=3, verbose=0,
              callbacks=[tfcluster_report.TfclusterCallback(batch_size=BATCH), Slow()])


if __name__ == "__main__":
    main()
