"""A tf.compat.v1 MonitoredTrainingSession reporting through tfcluster_report.TfclusterHook."""

from __future__ import annotations

import time

import tensorflow as tf
import tfcluster_report

v1 = tf.compat.v1
STEPS, BATCH = 300, 32


def main() -> None:
    v1.disable_eager_execution()
    global_step = v1.train.get_or_create_global_step()
    x = v1.random.normal([BATCH, 8], seed=1)
    y = v1.reduce_sum(x, axis=1, keepdims=True)
    w = v1.get_variable("w", [8, 1], initializer=v1.zeros_initializer())
    loss = v1.reduce_mean(v1.square(v1.matmul(x, w) - y))
    train_op = v1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=global_step)
    hooks = [v1.train.StopAtStepHook(last_step=STEPS), tfcluster_report.TfclusterHook(loss, batch_size=BATCH)]
    with v1.train.MonitoredTrainingSession(hooks=hooks, save_summaries_steps=None,
                                           save_checkpoint_secs=None) as sess:
        while not sess.should_stop():
            sess.run(train_op)
            time.sleep(0.007)  # ~2 s in all: several progress intervals


if __name__ == "__main__":
    main()
