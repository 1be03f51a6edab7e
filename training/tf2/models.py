"""The built-in models (`mlp`, `wide`) for the TF2 strategy modes, as tf.Modules without Keras.

Same variables as the graph-mode models and as training/models/sizes.py declares them (the plan's PS-load
estimate is computed from those shapes), same synthetic tasks:
- `mlp`: Gaussian inputs labelled by the fixed random teacher of training/models/mlp.py (`teacher_labels`);
- `wide`: `nnz` random rows of each shard per example, label = first row of shard 0 modulo `classes`;
  every step multiplies the sparse features with each whole shard, so a step pulls every shard and pushes
  back a dense gradient of the same size (what the model is for: PS load that grows with `params`).

Contract:
- `build(create, seed)`: creates the variables in sizes.py order, each through `create(VariableShape,
  initial_value_fn)` so the trainer decides placement (`strategy.scope()`; PSS: greedy by bytes,
  training/tf2/placement.py); initial values are stateless, keyed by the run's `seed`.
- `batch(batch_size, seed, shard, index)`: a pure function of its arguments (stateless random ops), so
  every worker/shard draws its own batches, the same ones again after a restart. `shard` identifies the
  worker, `index` the batch (a step counter).
- `per_example_loss(features, labels)`: [batch] losses; the trainer averages them over the global batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from ..models.mlp import teacher_labels
from ..models.sizes import VariableShape, mlp_shapes, wide_shapes
from .settings import BUILTIN_TF2_MODELS

# Keeps the data streams' stateless seeds apart from the teacher's ([seed, 1], [seed, 2]).
_DATA_SEED_OFFSET = 1 << 40
_SHARDS_PER_SEED = 1 << 16
_INIT_SEED = 1000  # second component of the initial values' stateless seeds

VariableFactory = Callable[[VariableShape, Callable[[], tf.Tensor]], tf.Variable]


def data_seed(seed: int, shard: Any, index: Any) -> tf.Tensor:
    """The [2] int64 stateless seed of batch `index` of `shard` in a run with `seed`."""
    first = tf.cast(shard, tf.int64) + (_DATA_SEED_OFFSET + seed * _SHARDS_PER_SEED)
    return tf.stack([first, tf.cast(index, tf.int64)])


class MLPModule(tf.Module):  # type: ignore[misc]
    def __init__(self, args: Mapping[str, object]) -> None:
        super().__init__(name="mlp")
        self.shapes = mlp_shapes(args)
        self.input_dim = self.shapes[0].shape[0]
        self.classes = self.shapes[-1].shape[0]
        self.weights: list[tf.Variable] = []

    def build(self, create: VariableFactory, seed: int) -> None:
        for i, shape in enumerate(self.shapes):
            if shape.name.endswith("kernel"):
                fan_in, fan_out = shape.shape
                limit = (6.0 / (fan_in + fan_out)) ** 0.5  # Glorot uniform, as the graph-mode mlp

                def init(s: tuple[int, ...] = shape.shape, lim: float = limit, i: int = i) -> tf.Tensor:
                    return tf.random.stateless_uniform(s, seed=[seed, _INIT_SEED + i], minval=-lim, maxval=lim)
            else:
                def init(s: tuple[int, ...] = shape.shape, lim: float = 0.0, i: int = i) -> tf.Tensor:
                    return tf.zeros(s)
            self.weights.append(create(shape, init))

    def batch(self, batch_size: int, seed: int, shard: Any, index: Any) -> tuple[tf.Tensor, tf.Tensor]:
        features = tf.random.stateless_normal([batch_size, self.input_dim], seed=data_seed(seed, shard, index))
        return features, teacher_labels(features, self.classes, seed)

    def per_example_loss(self, features: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        h = features
        layers = len(self.weights) // 2
        for i in range(layers):
            h = tf.matmul(h, self.weights[2 * i]) + self.weights[2 * i + 1]
            if i < layers - 1:
                h = tf.nn.relu(h)
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=h)


class WideModule(tf.Module):  # type: ignore[misc]
    def __init__(self, args: Mapping[str, object]) -> None:
        super().__init__(name="wide")
        self.shapes = wide_shapes(args)
        self.shards = len(self.shapes) - 1
        self.rows, self.classes = self.shapes[0].shape
        self.nnz = int(args.get("nnz", 8))  # type: ignore[call-overload]
        self.weights: list[tf.Variable] = []

    def build(self, create: VariableFactory, seed: int) -> None:
        del seed  # zeros, as the graph-mode wide model
        for shape in self.shapes:
            self.weights.append(create(shape, lambda s=shape.shape: tf.zeros(s)))  # type: ignore[misc]

    def batch(self, batch_size: int, seed: int, shard: Any, index: Any) -> tuple[tf.Tensor, tf.Tensor]:
        ids = tf.random.stateless_uniform([batch_size, self.shards, self.nnz], seed=data_seed(seed, shard, index),
                                          minval=0, maxval=self.rows, dtype=tf.int64)
        labels = tf.cast(tf.math.floormod(ids[:, 0, 0], self.classes), tf.int32)
        return ids, labels

    def per_example_loss(self, features: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        ids = features
        batch = tf.shape(ids, out_type=tf.int64)[0]
        rows = tf.reshape(tf.tile(tf.expand_dims(tf.range(batch), 1), [1, self.nnz]), [-1])
        values = tf.ones_like(rows, dtype=tf.float32)
        logits = self.weights[-1]  # the bias, broadcast over the batch
        for s in range(self.shards):
            indices = tf.stack([rows, tf.reshape(ids[:, s, :], [-1])], axis=1)
            sparse = tf.sparse.SparseTensor(indices, values, dense_shape=tf.stack([batch, self.rows]))
            logits = logits + tf.sparse.sparse_dense_matmul(sparse, self.weights[s])
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


Tf2Model = MLPModule | WideModule


def get_tf2_model(name: str, args: Mapping[str, object] | None = None) -> Tf2Model:
    """A built-in model by name; the TF2 modes have no `package.module:build` (use `command` instead)."""
    if name == "mlp":
        return MLPModule(dict(args or {}))
    if name == "wide":
        return WideModule(dict(args or {}))
    raise ValueError(f'model "{name}": the TF2 strategy modes train the built-in models '
                     f'({", ".join(BUILTIN_TF2_MODELS)}); run your own program with [training] command')
