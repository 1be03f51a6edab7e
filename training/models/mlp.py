"""`mlp`: a small dense network learning labels produced by a fixed random "teacher" network.

The teacher's weights come from stateless random ops keyed by the run's `seed`, so every task and every
tower of a run (and every run with that seed) learns the same function, while each input op draws its
own inputs (no op seed: two towers or two tasks never train on identical batches). The student has the
shapes of training/models/sizes.py mlp_shapes; its loss falls clearly within a few hundred steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from .sizes import VariableShape, mlp_shapes

v1 = tf.compat.v1

TEACHER_HIDDEN = 32


def teacher_labels(features: tf.Tensor, classes: int, seed: int) -> tf.Tensor:
    """Class labels from a fixed random 1-hidden-layer teacher (the same for every task with `seed`)."""
    input_dim = int(features.shape[-1])
    w1 = tf.random.stateless_normal([input_dim, TEACHER_HIDDEN], seed=[seed, 1]) / (input_dim**0.5)
    w2 = tf.random.stateless_normal([TEACHER_HIDDEN, classes], seed=[seed, 2]) / (TEACHER_HIDDEN**0.5)
    logits = tf.matmul(tf.tanh(tf.matmul(features, w1)), w2)
    return tf.argmax(logits, axis=1, output_type=tf.int32)


def synthetic_batch(batch_size: int, input_dim: int, classes: int, seed: int) -> tuple[tf.Tensor, tf.Tensor]:
    """A fresh batch every step: Gaussian inputs labelled by the teacher of `seed`."""
    features = v1.random.normal([batch_size, input_dim], name="features")
    return features, teacher_labels(features, classes, seed)


class MLP:
    name = "mlp"

    def __init__(self, args: Mapping[str, object]) -> None:
        self.args = dict(args)
        self._shapes = mlp_shapes(self.args)
        self.input_dim = self._shapes[0].shape[0]
        self.classes = self._shapes[-1].shape[0]

    @property
    def variable_shapes(self) -> list[VariableShape]:
        return list(self._shapes)

    def input_fn(self, batch_size: int, seed: int) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.name_scope("input"):
            return synthetic_batch(batch_size, self.input_dim, self.classes, seed)

    def loss(self, features: Any, labels: Any) -> tf.Tensor:
        layers = len(self._shapes) // 2
        h = features
        for i in range(layers):
            kernel_shape = self._shapes[2 * i].shape
            with v1.variable_scope(f"layer{i}", reuse=v1.AUTO_REUSE):
                kernel = v1.get_variable(
                    "kernel", kernel_shape, tf.float32, v1.glorot_uniform_initializer()
                )
                bias = v1.get_variable("bias", self._shapes[2 * i + 1].shape, tf.float32, v1.zeros_initializer())
            h = tf.matmul(h, kernel) + bias
            if i < layers - 1:
                h = tf.nn.relu(h)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=h), name="loss")
