"""The `[training] optimizer` names -> tf.compat.v1 optimizers."""

from __future__ import annotations

from typing import Any

OPTIMIZERS = ("sgd", "adam", "adagrad", "momentum")


def make_optimizer(name: str, learning_rate: float) -> Any:
    import tensorflow as tf

    v1 = tf.compat.v1
    if name == "sgd":
        return v1.train.GradientDescentOptimizer(learning_rate)
    if name == "adam":
        return v1.train.AdamOptimizer(learning_rate)
    if name == "adagrad":
        return v1.train.AdagradOptimizer(learning_rate)
    if name == "momentum":
        return v1.train.MomentumOptimizer(learning_rate, momentum=0.9)
    raise ValueError(f'unknown optimizer "{name}": use one of {", ".join(OPTIMIZERS)}')
