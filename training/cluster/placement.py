"""Greedy load balancing of variables over PS tasks by bytes. Stdlib only (the plan shares the rule).

`replica_device_setter`'s default round-robin balances variable *counts*, which can put every weight
matrix on one PS and every bias on the other; TF 2.x no longer ships GreedyLoadBalancingStrategy. The
rule here: each new variable goes to the PS task holding the fewest bytes so far (ties: lowest index).

- `greedy_assign(sizes, num_ps)`: the pure rule over a list of byte sizes (the plan's estimate).
- `GreedyByBytes(num_ps)`: the same rule as a `ps_strategy` callable for
  `tf.compat.v1.train.replica_device_setter`; it reads the variable op's `shape` and `dtype` attrs
  (duck-typed: no TensorFlow import here) and remembers what it placed for the placement log.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


def greedy_assign(sizes: Iterable[int], num_ps: int) -> list[int]:
    """PS index for each size, in order: fewest bytes so far wins, lowest index on ties."""
    if num_ps < 1:
        raise ValueError("num_ps must be >= 1")
    loads = [0] * num_ps
    out = []
    for size in sizes:
        target = min(range(num_ps), key=lambda i: (loads[i], i))
        loads[target] += max(0, int(size))
        out.append(target)
    return out


def op_nbytes(op: Any) -> int:
    """Bytes of the variable a VarHandleOp/VariableV2 op creates; unknown dimensions count as 1."""
    try:
        shape = op.get_attr("shape")
        dtype = op.get_attr("dtype")
    except (ValueError, AttributeError):
        return 0
    n = 1
    if getattr(shape, "unknown_rank", False):
        return int(getattr(dtype, "size", 4))
    dims = getattr(shape, "dim", None)
    # a TensorShapeProto has .dim; a TensorShape or a sequence holds ints or None
    sizes = [d.size for d in dims] if dims is not None else [d if d is not None else -1 for d in shape]
    for d in sizes:
        n *= d if d and d > 0 else 1
    return n * int(getattr(dtype, "size", 4))


@dataclass
class GreedyByBytes:
    """`ps_strategy` for replica_device_setter: called once per variable op, returns a PS task index."""

    num_ps: int
    loads: list[int] = field(init=False)
    placed: list[tuple[str, int, int]] = field(default_factory=list)  # (op name, ps index, bytes)

    def __post_init__(self) -> None:
        if self.num_ps < 1:
            raise ValueError("num_ps must be >= 1")
        self.loads = [0] * self.num_ps

    def __call__(self, op: Any) -> int:
        nbytes = op_nbytes(op)
        target = min(range(self.num_ps), key=lambda i: (self.loads[i], i))
        self.loads[target] += nbytes
        self.placed.append((str(getattr(op, "name", "?")), target, nbytes))
        return target
