"""Built-in models and the user's own (`module.path:build`). Graph-mode TensorFlow (tf.compat.v1).

`get_model(name, args)` is the single entry point; TensorFlow is imported lazily so that
`training.models.sizes` stays importable without it (the plan uses it on the user's machine).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Model

BUILTIN_MODELS = ("mlp", "wide")


def get_model(name: str, args: Mapping[str, object] | None = None) -> Model:
    """A built-in model by name, or the user's `package.module:build` (imported from the task's cwd)."""
    args = dict(args or {})
    if name == "mlp":
        from .mlp import MLP

        return MLP(args)
    if name == "wide":
        from .wide import Wide

        return Wide(args)
    if ":" in name:
        from .user import UserModel

        return UserModel(name, args)
    raise ValueError(f'unknown model "{name}": use one of {", ".join(BUILTIN_MODELS)} or "package.module:build"')
