"""`[training] optimizer` for the TF2 strategy modes without Keras: plain tf update rules.

The same four names and defaults as the graph-mode optimizers (training/cluster/optimizers.py, tf.compat.v1.train):
- sgd:      var -= lr * g
- momentum: acc = 0.9 * acc + g; var -= lr * acc
- adagrad:  acc += g^2 (acc starts at 0.1); var -= lr * g / sqrt(acc)
- adam:     m, v moving averages (0.9, 0.999, eps 1e-8) with v1's bias correction through beta1_power and
            beta2_power variables (updated once per apply, as AdamOptimizer does).

Contract:
- `build(strategy, variables)` once, under `strategy.scope()`: creates the slots, each colocated with its
  variable (`strategy.extended.colocate_vars_with`: on a parameter server the update runs where the
  variable lives, so only the gradient crosses the network), the beta powers with the first variable.
- `apply(strategy, grads, variables)` in cross-replica context (inside a tf.function, after
  `strategy.run` returned the gradients): `strategy.extended.update` runs each variable's rule on every
  device that holds a copy (multi-worker-mirrored) or next to it on its PS (parameter-server-strategy).
- `slot_variables()`: every variable it created, for the checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from ..cluster.optimizers import OPTIMIZERS

MOMENTUM = 0.9
ADAGRAD_INITIAL = 0.1
ADAM_BETA1, ADAM_BETA2, ADAM_EPSILON = 0.9, 0.999, 1e-8


class PlainOptimizer(tf.Module):  # type: ignore[misc]
    def __init__(self, kind: str, learning_rate: float) -> None:
        super().__init__(name=f"optimizer_{kind}")
        if kind not in OPTIMIZERS:
            raise ValueError(f'unknown optimizer "{kind}": use one of {", ".join(OPTIMIZERS)}')
        self.kind = kind
        self.learning_rate = float(learning_rate)
        self.slots: list[list[tf.Variable]] = []  # per model variable, in order
        self.beta_powers: list[tf.Variable] = []

    def build(self, strategy: tf.distribute.Strategy, variables: Sequence[tf.Variable]) -> None:
        names = {"sgd": (), "momentum": ("momentum",), "adagrad": ("accumulator",), "adam": ("m", "v")}[self.kind]
        initial = ADAGRAD_INITIAL if self.kind == "adagrad" else 0.0
        for var in variables:
            base = var.name.split(":")[0]
            with strategy.extended.colocate_vars_with(var):
                self.slots.append([
                    tf.Variable(tf.fill(var.shape, tf.constant(initial, var.dtype)), trainable=False,
                                name=f"{base}/{slot}") for slot in names
                ])
        if self.kind == "adam" and variables:
            with strategy.extended.colocate_vars_with(variables[0]):
                self.beta_powers = [tf.Variable(ADAM_BETA1, trainable=False, name="beta1_power"),
                                    tf.Variable(ADAM_BETA2, trainable=False, name="beta2_power")]

    def slot_variables(self) -> list[tf.Variable]:
        return [s for slots in self.slots for s in slots] + list(self.beta_powers)

    def apply(self, strategy: tf.distribute.Strategy, grads: Sequence[Any],
              variables: Sequence[tf.Variable]) -> list[Any]:
        """The update ops (run them before anything that must see the updated variables)."""
        lr = tf.constant(self.learning_rate)
        if self.kind == "adam":
            b1p, b2p = self.beta_powers
            lr = lr * tf.sqrt(1.0 - b2p.read_value()) / (1.0 - b1p.read_value())
        updates = []
        for var, grad, slots in zip(variables, grads, self.slots, strict=True):
            updates.append(strategy.extended.update(var, self._rule, args=(grad, lr, *slots), group=True))
        if self.kind == "adam":
            with tf.control_dependencies(updates):
                updates += [strategy.extended.update(power, lambda p, b=beta: p.assign(p * b), group=True)
                            for power, beta in zip(self.beta_powers, (ADAM_BETA1, ADAM_BETA2), strict=True)]
        return updates

    def _rule(self, var: tf.Variable, grad: tf.Tensor, lr: tf.Tensor, *slots: tf.Variable) -> Any:
        grad = tf.convert_to_tensor(grad)
        if self.kind == "sgd":
            return var.assign_sub(lr * grad)
        if self.kind == "momentum":
            (acc,) = slots
            new_acc = acc.assign(MOMENTUM * acc + grad)
            return var.assign_sub(lr * new_acc)
        if self.kind == "adagrad":
            (acc,) = slots
            new_acc = acc.assign_add(tf.square(grad))
            return var.assign_sub(lr * grad / tf.sqrt(new_acc))
        m, v = slots
        new_m = m.assign(ADAM_BETA1 * m + (1.0 - ADAM_BETA1) * grad)
        new_v = v.assign(ADAM_BETA2 * v + (1.0 - ADAM_BETA2) * tf.square(grad))
        return var.assign_sub(lr * new_m / (tf.sqrt(new_v) + ADAM_EPSILON))
