"""The [training] settings the TF2 trainers read, and the checkpoint timing both share. TensorFlow-free.

`TrainSettings.from_ctx(ctx)` turns the plan's `training` dict (orchestrator TrainingSection.model_dump())
into typed values with the same defaults as the config schema (and refuses a model the TF2 modes do not
have: one line, exit 2, before the task waits for its cluster). `CheckpointClock` decides when a
checkpoint is due: every `checkpoint_every_steps` global steps or every `checkpoint_every_secs` seconds
of this process's training, whichever comes first (the schema's defaults: 500 steps, 60 s).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..cluster.straggler import slowdown_factor
from ..run.context import TaskContext, TaskSetupError

DEFAULT_CHECKPOINT_SECS = 60.0
BUILTIN_TF2_MODELS = ("mlp", "wide")


@dataclass(frozen=True)
class TrainSettings:
    model: str
    model_args: dict[str, Any]
    batch_size: int
    steps: int
    optimizer: str
    learning_rate: float
    seed: int
    checkpoint_dir: str  # resolved for this task's run dir (RunLayout.checkpoints)
    checkpoint_every_steps: int | None
    checkpoint_every_secs: float | None
    summary_every_steps: int
    progress_interval: float
    slowdown: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_ctx(cls, ctx: TaskContext) -> TrainSettings:
        tr = ctx.training
        if tr.get("command"):
            raise TaskSetupError("[training] command is set: this task should run the user's program, not the "
                                 "built-in trainer")
        model = str(tr.get("model", "mlp"))
        if model not in BUILTIN_TF2_MODELS:  # checked before the task waits for its whole cluster
            raise TaskSetupError(f'[training] model "{model}": the TF2 strategy modes train the built-in models '
                                 f'({", ".join(BUILTIN_TF2_MODELS)}); run your own program with [training] command')
        every_steps = tr.get("checkpoint_every_steps")
        every_secs = tr.get("checkpoint_every_secs")
        every_secs = float(every_secs) if every_secs else (None if every_steps else DEFAULT_CHECKPOINT_SECS)
        return cls(
            model=model, model_args=dict(tr.get("model_args") or {}),
            batch_size=int(tr.get("batch_size", 128)), steps=int(tr.get("steps", 1000)),
            optimizer=str(tr.get("optimizer", "sgd")), learning_rate=float(tr.get("learning_rate", 0.05)),
            seed=int(tr.get("seed", 0)),
            checkpoint_dir=ctx.layout.checkpoints(str(tr.get("checkpoint_dir", "checkpoints"))),
            checkpoint_every_steps=int(every_steps) if every_steps else None, checkpoint_every_secs=every_secs,
            summary_every_steps=int(tr.get("summary_every_steps", 100)),
            progress_interval=float(tr.get("progress_interval", 1.0)),
            slowdown={str(k): float(v) for k, v in (tr.get("slowdown") or {}).items()},
        )

    def slowdown_of(self, job: str, index: int) -> float:
        return slowdown_factor(self.slowdown, job, index)


class CheckpointClock:
    """When the next checkpoint is due: the global step crossed a multiple of `every_steps` since the last
    save (steps may complete out of order, parameter-server-strategy), or `every_secs` passed since it,
    whichever comes first."""

    def __init__(self, every_steps: int | None, every_secs: float | None, clock: Any = time.monotonic) -> None:
        self.every_steps = every_steps
        self.every_secs = every_secs
        self._clock = clock
        self._last_t = clock()
        self._last_step = 0

    def due(self, global_step: int) -> bool:
        return self.due_by_steps(global_step) or self.due_by_time()

    def due_by_steps(self, global_step: int) -> bool:
        every = self.every_steps
        return every is not None and every > 0 and global_step // every > self._last_step // every

    def due_by_time(self) -> bool:
        """(Each process has its own clock: multi-worker-mirrored all-reduces this decision.)"""
        return self.every_secs is not None and self._clock() - self._last_t >= self.every_secs

    @property
    def last_step(self) -> int:
        return self._last_step

    def saved(self, global_step: int) -> None:
        self._last_t = self._clock()
        self._last_step = global_step
