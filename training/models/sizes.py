"""Parameter shapes of the built-in models, without TensorFlow.

The single definition of each built-in model's variables and arguments: the TF model code builds
exactly these shapes, and the plan uses them to estimate parameter-server load before anything
starts. `check_model_args` is the plan's check of `[training] model_args` (a bad value is one line on
the user's machine, never a traceback on a host).
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass

BYTES_PER_FLOAT32 = 4


@dataclass(frozen=True)
class VariableShape:
    name: str
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * BYTES_PER_FLOAT32


def mlp_shapes(args: Mapping[str, object]) -> list[VariableShape]:
    """`mlp`: input_dim -> hidden layers -> classes, dense with biases."""
    input_dim = _int_arg(args, "input_dim")
    hidden = _hidden(args.get("hidden", ARG_DEFAULTS["hidden"]))
    classes = _int_arg(args, "classes")
    dims = [input_dim, *hidden, classes]
    shapes = []
    for i, (a, b) in enumerate(itertools.pairwise(dims)):
        shapes.append(VariableShape(f"layer{i}/kernel", (a, b)))
        shapes.append(VariableShape(f"layer{i}/bias", (b,)))
    return shapes


def wide_shapes(args: Mapping[str, object]) -> list[VariableShape]:
    """`wide`: a linear model over a wide feature space, `params` parameters in total (1e5..1e8),
    split into `shards` weight matrices so several PS tasks can share the load."""
    params = _int_arg(args, "params")
    shards = _int_arg(args, "shards")
    classes = _int_arg(args, "classes")
    rows = max(1, params // (classes * shards))
    shapes = [VariableShape(f"wide/shard{i}", (rows, classes)) for i in range(shards)]
    shapes.append(VariableShape("wide/bias", (classes,)))
    return shapes


BUILTIN_SHAPES = {"mlp": mlp_shapes, "wide": wide_shapes}

# Every argument a built-in model reads, with its default and its range (inclusive). A user's model
# (`pkg.module:build`) takes mlp's input sizes and may read any other key itself.
ARG_DEFAULTS: dict[str, object] = {"input_dim": 32, "hidden": "128,128", "classes": 10, "params": 1_000_000,
                                   "shards": 4, "nnz": 8}
ARG_RANGES: dict[str, tuple[int, int]] = {
    "input_dim": (1, 1_000_000), "classes": (2, 100_000), "params": (1_000, 1_000_000_000),  # 4 GB of float32
    "shards": (1, 1024), "nnz": (1, 1024),
}
HIDDEN_RANGE = (1, 100_000)  # units per hidden layer
MODEL_ARGS = {"mlp": ("input_dim", "hidden", "classes"), "wide": ("params", "shards", "classes", "nnz")}
USER_MODEL_ARGS = ("input_dim", "classes")  # a user's model borrows these from mlp (training/models/user.py)


class ModelArgError(ValueError):
    """One bad `model_args` entry: `key` (None = the table itself), a message, maybe a suggestion."""

    def __init__(self, key: str | None, message: str, suggestion: str | None = None) -> None:
        super().__init__(message)
        self.key, self.message, self.suggestion = key, message, suggestion


def _int_arg(args: Mapping[str, object], key: str) -> int:
    value = args.get(key, ARG_DEFAULTS[key])
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # `params = 1e6` is how people write sizes
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelArgError(key, f"`{key}` must be an integer, got {value!r}")
    low, high = ARG_RANGES[key]
    if not low <= value <= high:
        raise ModelArgError(key, f"`{key}` = {value} is out of range ({low}-{high})")
    return value


def _hidden(value: object) -> list[int]:
    """`hidden = "256,256"` (or one integer): the units of each hidden layer."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    parts = [p.strip() for p in str(value).split(",")] if isinstance(value, str) else []
    if not parts or not all(p.isdigit() for p in parts):
        raise ModelArgError("hidden", f'`hidden` must list layer sizes like "256,256", got {value!r}')
    sizes = [int(p) for p in parts]
    low, high = HIDDEN_RANGE
    if not all(low <= h <= high for h in sizes):
        raise ModelArgError("hidden", f"`hidden` layer sizes must be {low}-{high}, got {value!r}")
    return sizes


def check_model_args(model: str, args: Mapping[str, object]) -> None:
    """Raise ModelArgError for an unknown key (built-in models) or a bad value of a known one."""
    known = MODEL_ARGS.get(model)
    if known is not None:
        for key in args:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                raise ModelArgError(key, f"`{model}` has no argument `{key}`; its arguments: {', '.join(known)}",
                                    close[0] if close else None)
        BUILTIN_SHAPES[model](args)
        if "nnz" in args:
            _int_arg(args, "nnz")
        return
    for key in USER_MODEL_ARGS:
        if key in args:
            _int_arg(args, key)


def model_bytes(model: str, args: Mapping[str, object]) -> int | None:
    """Total float32 bytes of a built-in model's trainable variables; None for a user's model."""
    fn = BUILTIN_SHAPES.get(model)
    if fn is None:
        return None
    return sum(v.nbytes for v in fn(args))
