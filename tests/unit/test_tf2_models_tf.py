"""The TF2 built-in models and optimizers, in one process (no cluster): the variables are exactly
training/models/sizes.py's, batches are a pure function of (seed, shard, index), and each plain optimizer
makes the same updates as the tf.compat.v1.train optimizer of the same name (what the graph modes use).
Needs TensorFlow: fails where it is missing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from training.cluster.optimizers import OPTIMIZERS, make_optimizer
from training.models.sizes import VariableShape, mlp_shapes, wide_shapes
from training.tf2.models import Tf2Model, get_tf2_model
from training.tf2.optimizer import PlainOptimizer


def plain_variable(shape: VariableShape, initial: Any) -> tf.Variable:
    return tf.Variable(initial, name=shape.name)


def built(name: str, args: dict[str, object], seed: int = 0) -> Tf2Model:
    model = get_tf2_model(name, args)
    model.build(plain_variable, seed)
    return model


@pytest.mark.parametrize(("name", "args", "shapes"), [
    ("mlp", {}, mlp_shapes({})),
    ("mlp", {"input_dim": 8, "hidden": "16,4,12", "classes": 3}, mlp_shapes({"input_dim": 8, "hidden": "16,4,12",
                                                                              "classes": 3})),
    ("wide", {"params": 100_000, "shards": 3}, wide_shapes({"params": 100_000, "shards": 3})),
])
def test_variables_are_the_sizes_module_shapes(name: str, args: dict[str, object],
                                               shapes: list[VariableShape]) -> None:
    model = built(name, args)
    assert [(v.name.split(":")[0], tuple(v.shape.as_list())) for v in model.weights] == \
        [(s.name, s.shape) for s in shapes]
    assert sum(int(np.prod(v.shape)) * 4 for v in model.weights) == sum(s.nbytes for s in shapes)


def test_initial_values_follow_the_seed() -> None:
    a, b, c = built("mlp", {}, seed=1), built("mlp", {}, seed=1), built("mlp", {}, seed=2)
    assert np.array_equal(a.weights[0].numpy(), b.weights[0].numpy())
    assert not np.array_equal(a.weights[0].numpy(), c.weights[0].numpy())


@pytest.mark.parametrize("name", ["mlp", "wide"])
def test_batches_are_a_pure_function_of_seed_shard_and_index(name: str) -> None:
    model = built(name, {"params": 10_000} if name == "wide" else {})

    def draw(seed: int, shard: int, index: int) -> tuple[np.ndarray, np.ndarray]:
        f, y = model.batch(16, seed, tf.constant(shard), tf.constant(index, tf.int64))
        return f.numpy(), y.numpy()

    same = draw(3, 1, 7)
    assert all(np.array_equal(x, y) for x, y in zip(same, draw(3, 1, 7), strict=True))
    for other in (draw(3, 0, 7), draw(3, 1, 8), draw(4, 1, 7)):
        assert not np.array_equal(same[0], other[0])
    labels = same[1]
    assert labels.shape == (16,) and labels.min() >= 0 and labels.max() < 10


@pytest.mark.parametrize("name", ["mlp", "wide"])
def test_sgd_lowers_the_loss(name: str) -> None:
    model = built(name, {"params": 1000, "shards": 2, "nnz": 2} if name == "wide" else {})
    strategy = tf.distribute.get_strategy()
    optimizer = PlainOptimizer("sgd", 2.0 if name == "wide" else 0.1)
    optimizer.build(strategy, model.weights)

    @tf.function  # type: ignore[untyped-decorator]
    def step(index: tf.Tensor) -> tf.Tensor:
        features, labels = model.batch(256, 0, 0, index)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model.per_example_loss(features, labels))
        optimizer.apply(strategy, tape.gradient(loss, model.weights), model.weights)
        return loss

    losses = [float(step(tf.constant(i, tf.int64))) for i in range(150)]
    assert np.mean(losses[-10:]) < 0.8 * np.mean(losses[:10]), losses[::10]


@pytest.mark.parametrize("kind", OPTIMIZERS)
def test_plain_optimizer_matches_the_v1_optimizer_of_the_same_name(kind: str) -> None:
    rng = np.random.default_rng(0)
    start = [rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=(3,)).astype(np.float32)]
    grads = [[rng.normal(size=v.shape).astype(np.float32) for v in start] for _ in range(4)]
    ours = [tf.Variable(v) for v in start]
    theirs = [tf.Variable(v) for v in start]
    strategy = tf.distribute.get_strategy()
    plain = PlainOptimizer(kind, 0.05)
    plain.build(strategy, ours)
    v1 = make_optimizer(kind, 0.05)
    for g in grads:
        plain.apply(strategy, [tf.constant(x) for x in g], ours)
        v1.apply_gradients(zip([tf.constant(x) for x in g], theirs, strict=True))
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    assert len(plain.slot_variables()) == {"sgd": 0, "momentum": 2, "adagrad": 2, "adam": 6}[kind]


def test_the_tf2_modes_name_their_models() -> None:
    with pytest.raises(ValueError, match="built-in models"):
        get_tf2_model("mypkg.model:build", {})
