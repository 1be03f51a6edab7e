"""`wide`: a linear model over a wide, sparse feature space, sized by `params` (1e5..1e8) to load the PS tasks.

Variables exactly as training/models/sizes.py wide_shapes: `shards` weight matrices [rows, classes] (so
several PS tasks share the load) and a bias. Each example activates `nnz` random rows of every shard; the
label is the first active row of shard 0 modulo `classes` (learnable by the linear model).

Every step multiplies the sparse features with each whole shard (`sparse_dense_matmul` on the worker),
so each step really pulls every shard from its PS task and pushes back a dense gradient of the same size:
the parameter-server traffic grows with `params`, which is what this model is for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from .sizes import VariableShape, wide_shapes

v1 = tf.compat.v1


class Wide:
    name = "wide"

    def __init__(self, args: Mapping[str, object]) -> None:
        self.args = dict(args)
        self._shapes = wide_shapes(self.args)
        self.shards = len(self._shapes) - 1
        self.rows, self.classes = self._shapes[0].shape
        self.nnz = int(self.args.get("nnz", 8))  # type: ignore[call-overload]

    @property
    def variable_shapes(self) -> list[VariableShape]:
        return list(self._shapes)

    def input_fn(self, batch_size: int, seed: int) -> tuple[tf.Tensor, tf.Tensor]:
        """features: int64 row ids [batch, shards, nnz]; labels: int32 [batch]."""
        del seed  # inputs are random per op; the label rule is fixed
        with tf.name_scope("input"):
            ids = v1.random.uniform(
                [batch_size, self.shards, self.nnz], maxval=self.rows, dtype=tf.int64, name="ids"
            )
            labels = tf.cast(tf.math.floormod(ids[:, 0, 0], self.classes), tf.int32, name="labels")
        return ids, labels

    def loss(self, features: Any, labels: Any) -> tf.Tensor:
        ids = features
        batch = tf.shape(ids, out_type=tf.int64)[0]
        logits = None
        with v1.variable_scope("wide", reuse=v1.AUTO_REUSE):
            for s in range(self.shards):
                shape = self._shapes[s].shape
                weights = v1.get_variable(f"shard{s}", shape, tf.float32, v1.zeros_initializer())
                shard_ids = ids[:, s, :]
                rows = tf.reshape(tf.tile(tf.expand_dims(tf.range(batch), 1), [1, self.nnz]), [-1])
                indices = tf.stack([rows, tf.reshape(shard_ids, [-1])], axis=1)
                values = tf.ones_like(rows, dtype=tf.float32)
                sparse = tf.sparse.SparseTensor(indices, values, dense_shape=tf.stack([batch, shape[0]]))
                part = tf.sparse.sparse_dense_matmul(sparse, weights)
                logits = part if logits is None else logits + part
            bias = v1.get_variable("bias", self._shapes[-1].shape, tf.float32, v1.zeros_initializer())
        assert logits is not None
        return tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits + bias), name="loss"
        )
