"""Prints TF1 training-hook progress: StepCounterHook (`global_step/sec: X`) and LoggingTensorHook
({"loss", "step"}: `loss = X, step = N (S sec)`), the two hooks tf.estimator.Estimator installed, from a
tf.compat.v1 MonitoredTrainingSession. `--absl` runs under absl.app.run (absl's `I0101 ...] ` prefix);
otherwise TensorFlow's own python logger (`INFO:tensorflow:` prefix). Used by capture.py."""

from __future__ import annotations

import sys
import tempfile
import time

import tensorflow as tf

v1 = tf.compat.v1
STEPS = 600
EVERY = 100


def train() -> None:
    v1.disable_eager_execution()
    v1.logging.set_verbosity(v1.logging.INFO)  # what Estimator users set; TF's default level is WARNING
    global_step = v1.train.get_or_create_global_step()
    x = v1.random.normal([32, 8], seed=1)
    y = v1.reduce_sum(x, axis=1, keepdims=True) + 0.1 * v1.random.normal([32, 1], seed=2)  # a floor of ~0.01
    w = v1.get_variable("w", [8, 1], initializer=v1.zeros_initializer())
    loss = v1.reduce_mean(v1.square(v1.matmul(x, w) - y))
    train_op = v1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=global_step)
    hooks = [
        v1.train.StopAtStepHook(last_step=STEPS),
        v1.train.LoggingTensorHook({"loss": loss, "step": global_step}, every_n_iter=EVERY),
    ]
    # StepCounterHook is only installed with a summary (or checkpoint) dir, as an Estimator's model_dir
    with tempfile.TemporaryDirectory() as summary_dir, v1.train.MonitoredTrainingSession(
            hooks=hooks, log_step_count_steps=EVERY, summary_dir=summary_dir,
            save_summaries_steps=None, save_checkpoint_secs=None) as sess:
        while not sess.should_stop():
            sess.run(train_op)
            time.sleep(0.002)  # a step that takes a few ms, like a real one


def main(argv: list[str]) -> None:
    train()


if __name__ == "__main__":
    if "--absl" in sys.argv:
        from absl import app

        app.run(main, argv=[sys.argv[0]])
    else:
        train()
