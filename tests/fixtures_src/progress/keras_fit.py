"""Prints Keras 3 `Model.fit` progress with stdout on a file, as a tfcluster task's is: `--verbose 1`
(the progress bar: Keras 3 treats any POSIX stdout as a dynamic display, so a file gets `\\b`/`\\r`
updates at most every 0.05 s and a newline at the end of each epoch) or `--verbose 2` (one line per
epoch). Used by capture.py."""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import tensorflow as tf


class StepTime(tf.keras.callbacks.Callback):  # type: ignore[misc]
    """Makes each batch take a few ms, like a real step, so verbose=1 prints several updates per epoch."""

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        time.sleep(0.004)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--verbose", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3200, 8)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    model.fit(x, y, batch_size=32, epochs=args.epochs, verbose=args.verbose, callbacks=[StepTime()])


if __name__ == "__main__":
    main()
