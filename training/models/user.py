"""The user's own model: `model = "package.module:build"`, imported from the task's cwd (the run's code/).

`build(features, labels)` builds its loss in the default graph and returns it; its variables are placed by
the caller's device setter like the built-ins'. Data comes from an optional `input_fn(batch_size)` in the
same module, else from the `mlp` synthetic task (features [batch, input_dim] float32, int32 labels in
[0, classes), both sizes from model_args with mlp's defaults). To share variables across in-graph towers,
`build` should create them with tf.compat.v1.get_variable; it is called under AUTO_REUSE.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from .mlp import synthetic_batch
from .sizes import VariableShape, mlp_shapes

v1 = tf.compat.v1


def load_callable(spec: str, attr: str | None = None) -> Callable[..., Any] | None:
    """`pkg.mod:name` -> the callable (or the module's `attr` when given; None if absent)."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise ValueError(f'model "{spec}" must look like "package.module:build"')
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f'model "{spec}": cannot import {module_name}: {e}') from e
    target = getattr(module, attr or name, None)
    if target is None and attr is None:
        raise ValueError(f'model "{spec}": {module_name} has no attribute {name}')
    if target is not None and not callable(target):
        raise ValueError(f'model "{spec}": {module_name}.{attr or name} is not callable')
    return target


class UserModel:
    def __init__(self, spec: str, args: Mapping[str, object]) -> None:
        self.name = spec
        self.args = dict(args)
        build = load_callable(spec)
        assert build is not None
        self._build = build
        self._input_fn = load_callable(spec, "input_fn")
        dims = mlp_shapes(self.args)
        self.input_dim = dims[0].shape[0]
        self.classes = dims[-1].shape[0]

    @property
    def variable_shapes(self) -> list[VariableShape]:
        return []  # unknown until built: callers read the graph's variables

    def input_fn(self, batch_size: int, seed: int) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.name_scope("input"):
            if self._input_fn is not None:
                params = inspect.signature(self._input_fn).parameters
                if "seed" in params:
                    features, labels = self._input_fn(batch_size, seed=seed)
                else:
                    features, labels = self._input_fn(batch_size)
                return features, labels
            return synthetic_batch(batch_size, self.input_dim, self.classes, seed)

    def loss(self, features: Any, labels: Any) -> tf.Tensor:
        with v1.variable_scope(v1.get_variable_scope(), reuse=v1.AUTO_REUSE):
            loss = self._build(features, labels)
        loss = tf.convert_to_tensor(loss)
        if loss.shape.rank not in (0, None):
            loss = tf.reduce_mean(loss)
        return loss
