"""A built-in trainer's model of the test's own (`model = "paced_model:build"`, shipped with `sync`) whose
every step waits the test's pause for its batch: the test paces a real TensorFlow run (so it outlasts a
resize, or keeps two workers in step on a loaded machine) and, once it has seen what it waits for, ends
every task's input (`end_input`: the end of data, on which the trainers end as at their last step). The
run's end is then the test's event, never a bet on how long the steps before it took. A synchronous run
cannot end so (a replica whose input ended leaves the others waiting for its gradients): there the test
ends the pacing instead (`end_pause`: every step from then on draws its batch at once) and the run ends
at its `steps`, as the replicas' shared global step gets there together.

The wait is a py_func under the batch's control dependency, so it runs in the process that draws the batch
(a between-graph worker, the in-graph client: `input = "client"`, the default); the end file is looked for
where it runs, which is any machine of the test's: they share one workdir.
"""

from __future__ import annotations

from pathlib import Path

MODULE = "paced_model"
MODEL = '''\
import os
import time

import numpy as np
import tensorflow as tf

v1 = tf.compat.v1


def _wait():  # the step's wait for its batch; no batch once the end file is there (StopIteration is
    if os.path.exists(END_FILE):  # TensorFlow's OutOfRangeError: the input's end)
        raise StopIteration
    if not os.path.exists(UNPACED_FILE):
        time.sleep(PAUSE_S)
    return np.int64(0)


def input_fn(batch_size):
    with tf.control_dependencies([v1.py_func(_wait, [], tf.int64, stateful=True)]):
        features = tf.random.normal([batch_size, 16])
    return features, tf.random.uniform([batch_size], 0, 4, dtype=tf.int32)


def build(features, labels):
    logits = tf.matmul(features, v1.get_variable("w", [16, 4])) + v1.get_variable("b", [4])
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
'''


class PacedModel:
    """Writes `paced_model.py`, each step paced `pause_ms`, into `directory` (the hosts file's: `sync` ships it)."""

    def __init__(self, directory: Path, pause_ms: int) -> None:
        self.directory = directory
        self.end_file = directory / "input_ends"
        self.unpaced_file = directory / "pause_ends"
        source = (MODEL.replace("PAUSE_S", repr(pause_ms / 1000)).replace("END_FILE", repr(str(self.end_file)))
                  .replace("UNPACED_FILE", repr(str(self.unpaced_file))))
        (directory / f"{MODULE}.py").write_text(source)

    def training(self, **settings: object) -> dict[str, object]:
        """`[training]` running this model, with the test's other settings."""
        return {"model": f"{MODULE}:build", "sync": [f"{MODULE}.py"], **settings}

    def end_input(self) -> None:
        """Every task's input ends at its next step: TensorFlow's end of data, on which the built-in trainers
        end training as at their last step (a run whose length is the test's, not a bet on its stages')."""
        self.end_file.touch()

    def end_pause(self) -> None:
        """Every task's steps from now on draw their batch without the pause (a synchronous run then trains
        to its `steps` at the machine's pace)."""
        self.unpaced_file.touch()
