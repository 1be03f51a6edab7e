"""A TF 2 eager training loop reporting every step with tfcluster_report.report()."""

from __future__ import annotations

import time

import tensorflow as tf
from tfcluster_report import report

STEPS, BATCH = 400, 32


def main() -> None:
    x = tf.random.stateless_normal([BATCH * 10, 8], seed=[1, 2])
    y = tf.reduce_sum(x, axis=1, keepdims=True)
    w = tf.Variable(tf.zeros([8, 1]))
    opt = tf.keras.optimizers.SGD(0.05)

    @tf.function  # type: ignore[untyped-decorator]
    def step(xb: tf.Tensor, yb: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(xb, w) - yb))
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    for i in range(STEPS):
        lo = (i % 10) * BATCH
        loss = step(x[lo:lo + BATCH], y[lo:lo + BATCH])
        report(loss=loss, examples=BATCH)  # an eager tensor: report() takes it as it is
        if i % 20 == 0:
            time.sleep(0.1)  # ~2 s in all: several progress intervals


if __name__ == "__main__":
    main()
