"""The straggler switch: `[training] slowdown = {"worker:1" = 4.0}` makes that task N times slower per step.

Between-graph workers sleep in their own Python loop. An in-graph worker runs no Python of its own (only a
TF server), so its delay must be an op that runs *on that worker's device*: `sleep_op` builds one from
public raw ops (a one-element SleepDataset drained by DatasetToSingleElement, which sleeps in the worker's
TF runtime without burning a core). Its duration is a tensor, so the client can feed it every step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any


def _middle(values: Iterable[float]) -> float:
    """The median of step times (the upper middle one of an even count): robust to their heavy tail."""
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def slowdown_factor(slowdown: Mapping[str, Any], job: str, index: int) -> float:
    """The `slowdown` factor for `job:index` (1.0 = not slowed)."""
    value = slowdown.get(f"{job}:{index}", 1.0)
    return max(1.0, float(value))


def sleep_op(delay_us: Any) -> Any:
    """An op that sleeps `delay_us` microseconds (an int64 scalar tensor) where it is placed.

    Call it under the device scope of the task that must be slow. SleepDataset sleeps before producing
    each element; TakeDataset(1) keeps DatasetToSingleElement from asking (and sleeping) a second time.
    """
    import tensorflow as tf

    spec = {"output_types": [tf.int64], "output_shapes": [[]]}
    with tf.name_scope("straggler_sleep"):
        ds = tf.raw_ops.TensorDataset(components=[tf.constant(0, tf.int64)], output_shapes=[[]])
        ds = tf.raw_ops.SleepDataset(input_dataset=ds, sleep_microseconds=delay_us, **spec)
        ds = tf.raw_ops.TakeDataset(input_dataset=ds, count=tf.constant(1, tf.int64), **spec)
        return tf.raw_ops.DatasetToSingleElement(dataset=ds, **spec)[0]


class DelayPacer:
    """How long each straggler sleeps in the next step: (factor - 1) x the step time without any delay.

    The undelayed step time is the client's wall time of a step minus the longest delay injected in it
    (the towers sleep in parallel), taken as the median of the last `window` steps (step times have a
    heavy tail: a mean would overshoot, and one slow step must not snowball); the first steps (session
    start, graph warm-up) are ignored. One pacer serves every slowed tower of the step.
    """

    def __init__(self, warmup_steps: int = 2, window: int = 25) -> None:
        self.warmup_steps = warmup_steps
        self._recent: deque[float] = deque(maxlen=window)
        self._seen = 0

    @property
    def base_s(self) -> float | None:
        return _middle(self._recent) if self._recent else None

    def observe(self, wall_s: float, injected_s: float) -> None:
        self._seen += 1
        if self._seen > self.warmup_steps:
            self._recent.append(max(0.0, wall_s - injected_s))

    def delay_s(self, factor: float) -> float:
        base = self.base_s
        if factor <= 1.0 or base is None:
            return 0.0
        return (factor - 1.0) * base


class BaselinePacer:
    """How long a straggler that paces itself (between-graph, multi-worker-mirrored) sleeps after each step:
    (factor - 1) x its own step time, measured once, before it sleeps at all: the median of
    `calibration_steps` unpaced steps after the first (which builds or traces the graph).

    Not each step's own time: a synchronous step waits in its all-reduce for the slowest peer, so with two
    slowed workers each one's step held the other's sleep, and each sleep a multiple of it: the delays grew
    threefold a step (4x) until the collective timed out; and a between-graph step holds any session
    recovery made inside it (a PS restarted), whose multiple stalled the worker long after the outage.
    """

    def __init__(self, factor: float, calibration_steps: int = 5) -> None:
        self.factor = factor
        self.calibration_steps = calibration_steps
        self._steps: list[float] = []
        self._seen = 0
        self.base_s: float | None = None

    def delay_s(self, step_s: float) -> float:
        """The sleep after a step that took `step_s` (seconds, its own time, sleep excluded)."""
        self._seen += 1
        if self.factor <= 1.0 or self._seen == 1:
            return 0.0
        if self.base_s is None:
            self._steps.append(step_s)
            if len(self._steps) < self.calibration_steps:
                return 0.0
            self.base_s = _middle(self._steps)
        return (self.factor - 1.0) * self.base_s
