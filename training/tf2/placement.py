"""Variables of a ParameterServerStrategy placed greedy by bytes, as the graph modes and the plan place them.

ParameterServerStrategy puts the k-th variable created in its scope on `ps:(k mod n)` (round robin by count,
whatever device scope is active). The project's rule (training/cluster/placement.py `greedy_assign`, which the plan's
PS-load estimate uses) is: each new variable goes to the PS holding the fewest bytes so far, lowest index on
ties. The two agree as long as some PS holds nothing yet (the emptiest PS is then the next one round robin
names), so `GreedyPsPlacer` creates each variable plainly while that holds and, once every PS holds one
("anchor"), with `strategy.extended.colocate_vars_with(anchor of the chosen PS)`, which TF honours instead of
its round robin. Every placement is checked against the variable's real device.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from ..models.sizes import VariableShape
from ..telemetry.accounting import PlacedVariable, ps_task_of


def _nbytes(var: tf.Variable) -> int:
    return int(math.prod(var.shape.as_list())) * int(var.dtype.size)


class GreedyPsPlacer:
    def __init__(self, strategy: tf.distribute.Strategy, num_ps: int) -> None:
        if num_ps < 1:
            raise ValueError("parameter-server-strategy needs at least one ps task")
        self.strategy = strategy
        self.num_ps = num_ps
        self.loads = [0] * num_ps
        self.anchors: list[tf.Variable | None] = [None] * num_ps
        self.plain_created = 0  # variables TF's round robin has placed
        self.placed: list[tuple[tf.Variable, bool]] = []  # (variable, trainable)

    def create(self, name: str, initial_value: Callable[[], Any], nbytes: int, *, dtype: Any = None,
               trainable: bool = True) -> tf.Variable:
        target = min(range(self.num_ps), key=lambda i: (self.loads[i], i))
        anchor = self.anchors[target]
        if anchor is None:
            round_robin = self.plain_created % self.num_ps
            if round_robin != target:  # only with a zero-byte variable: never in the built-in models
                raise RuntimeError(f"cannot place {name} on ps:{target} (round robin says ps:{round_robin})")
            var = tf.Variable(initial_value, name=name, dtype=dtype, trainable=trainable)
            self.plain_created += 1
            self.anchors[target] = var
        else:
            with self.strategy.extended.colocate_vars_with(anchor):
                var = tf.Variable(initial_value, name=name, dtype=dtype, trainable=trainable)
        landed = ps_task_of(var.device)
        if landed != f"ps-{target}":
            raise RuntimeError(f"variable {name} landed on {var.device}, not on ps:{target}")
        self.loads[target] += nbytes
        self.placed.append((var, trainable))
        return var

    def model_variable(self, shape: VariableShape, initial_value: Callable[[], Any]) -> tf.Variable:
        """A `VariableFactory` for training/tf2/models.py."""
        return self.create(shape.name, initial_value, shape.nbytes)

    def placed_variables(self, extra: list[tf.Variable] | None = None) -> list[PlacedVariable]:
        """Everything on the PS tasks (optimizer slots in `extra`, not trainable) for the accounting."""
        out = [PlacedVariable(v.name.split(":")[0], v.device, _nbytes(v), trainable=t) for v, t in self.placed]
        out += [PlacedVariable(v.name.split(":")[0], v.device, _nbytes(v), trainable=False) for v in extra or []]
        return out
