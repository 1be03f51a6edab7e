"""Parameter shapes of the built-in models, without TensorFlow.

The single definition of each built-in model's variables: the TF model code builds exactly these
shapes, and the plan uses them to estimate parameter-server load before anything starts.
"""

from __future__ import annotations

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
    input_dim = int(args.get("input_dim", 32))  # type: ignore[call-overload]
    hidden = [int(h) for h in str(args.get("hidden", "128,128")).split(",") if h.strip()]
    classes = int(args.get("classes", 10))  # type: ignore[call-overload]
    dims = [input_dim, *hidden, classes]
    shapes = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        shapes.append(VariableShape(f"layer{i}/kernel", (a, b)))
        shapes.append(VariableShape(f"layer{i}/bias", (b,)))
    return shapes


def wide_shapes(args: Mapping[str, object]) -> list[VariableShape]:
    """`wide`: a linear model over a wide feature space, `params` parameters in total (1e5..1e8),
    split into `shards` weight matrices so several PS tasks can share the load."""
    params = int(float(args.get("params", 1_000_000)))  # type: ignore[arg-type]
    shards = int(args.get("shards", 4))  # type: ignore[call-overload]
    classes = int(args.get("classes", 10))  # type: ignore[call-overload]
    rows = max(1, params // (classes * shards))
    shapes = [VariableShape(f"wide/shard{i}", (rows, classes)) for i in range(shards)]
    shapes.append(VariableShape("wide/bias", (classes,)))
    return shapes


BUILTIN_SHAPES = {"mlp": mlp_shapes, "wide": wide_shapes}


def model_bytes(model: str, args: Mapping[str, object]) -> int | None:
    """Total float32 bytes of a built-in model's trainable variables; None for a user's model."""
    fn = BUILTIN_SHAPES.get(model)
    if fn is None:
        return None
    return sum(v.nbytes for v in fn(args))
