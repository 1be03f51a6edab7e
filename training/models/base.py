"""The model interface shared by the between-graph worker and the in-graph client. No TF import here.

A model builds graph-mode (tf.compat.v1) ops into the default graph:
- `input_fn(batch_size, seed)` -> (features, labels): synthetic data generated in the graph (never
  downloaded), a fresh batch every step; call it under the device scope that should produce the data.
- `loss(features, labels)` -> scalar loss. Variables come from `tf.compat.v1.get_variable` under
  `AUTO_REUSE`, so calling `loss` several times (one call per in-graph tower) shares one set of variables;
  they land wherever the caller's device scope (a replica_device_setter) puts them.
- `variable_shapes`: the built-in models' variables as training/models/sizes.py declares them (the plan's
  PS-load estimate); empty for a user's model, whose variables are only known once built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from .sizes import VariableShape

if TYPE_CHECKING:
    import tensorflow as tf


class Model(Protocol):
    name: str

    @property
    def variable_shapes(self) -> list[VariableShape]: ...

    def input_fn(self, batch_size: int, seed: int) -> tuple[tf.Tensor, tf.Tensor]: ...

    def loss(self, features: Any, labels: Any) -> tf.Tensor: ...
