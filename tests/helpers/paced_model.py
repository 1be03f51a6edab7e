"""A built-in trainer's model of the test's own (`model = "paced_model:build"`, shipped with `sync`) whose
every step waits for its batch as long as a file of the test's says, read at every step: the test paces a
real TensorFlow run (so it outlasts a resize, or keeps two workers in step on a loaded machine) and then
lets it sprint to its last step once it has seen what it waits for. The run's end is then the test's
event, never a bet on how long the steps before it took.

The pause is a dataset op (SleepDataset) under the batch's control dependency, so it runs where the batch
is drawn (a between-graph worker, the in-graph client); the file is read where the op runs, which is any
machine of the test's: they share one workdir.
"""

from __future__ import annotations

from pathlib import Path

MODULE = "paced_model"
MODEL = '''\
import tensorflow as tf

v1 = tf.compat.v1


def _pause():  # an op that sleeps as many microseconds as the pause file says, where it runs
    spec = {"output_types": [tf.int64], "output_shapes": [[]]}
    micros = tf.strings.to_number(tf.io.read_file(PAUSE_FILE), out_type=tf.int64)
    ds = tf.raw_ops.TensorDataset(components=[tf.constant(0, tf.int64)], output_shapes=[[]])
    ds = tf.raw_ops.SleepDataset(input_dataset=ds, sleep_microseconds=micros, **spec)
    ds = tf.raw_ops.TakeDataset(input_dataset=ds, count=tf.constant(1, tf.int64), **spec)
    return tf.raw_ops.DatasetToSingleElement(dataset=ds, **spec)[0]


def input_fn(batch_size):
    with tf.control_dependencies([_pause()]):
        features = tf.random.normal([batch_size, 16])
    return features, tf.random.uniform([batch_size], 0, 4, dtype=tf.int32)


def build(features, labels):
    logits = tf.matmul(features, v1.get_variable("w", [16, 4])) + v1.get_variable("b", [4])
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
'''


class PacedModel:
    """Writes `paced_model.py` into `directory` (the hosts file's: `sync` ships it) and its pause file."""

    def __init__(self, directory: Path, pause_ms: int) -> None:
        self.pause_file = directory / "pause_us"
        self.set_pause(pause_ms)
        (directory / f"{MODULE}.py").write_text(MODEL.replace("PAUSE_FILE", repr(str(self.pause_file))))

    def training(self, **settings: object) -> dict[str, object]:
        """`[training]` running this model, with the test's other settings."""
        return {"model": f"{MODULE}:build", "sync": [f"{MODULE}.py"], **settings}

    def set_pause(self, ms: int) -> None:
        """Replaced whole (a rename): a step never reads it half-written."""
        tmp = self.pause_file.with_suffix(".tmp")
        tmp.write_text(str(ms * 1000))
        tmp.replace(self.pause_file)
