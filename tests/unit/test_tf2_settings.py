"""training/tf2/settings.py: [training] defaults as the config schema has them, and when a checkpoint is due."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.config.schema import TrainingSection
from training.run.context import TaskContext, TaskSetupError
from training.run.layout import RunLayout
from training.tf2.settings import CheckpointClock, TrainSettings


def ctx_with(training: dict[str, Any]) -> TaskContext:
    task = {"job": "worker", "index": 1, "device": "/job:worker/task:1/device:CPU:0", "is_chief": False}
    plan = {"mode": "multi-worker-mirrored", "cluster_spec": {"worker": ["a:1", "b:2"]}, "tasks": [task],
            "training": TrainingSection.model_validate(training).model_dump()}
    return TaskContext(job="worker", index=1, host="b", mode="multi-worker-mirrored", layout=RunLayout("/r/run"), run_id="r1",
                       plan=plan, task_plan=task)


def test_defaults_are_the_schemas() -> None:
    s = TrainSettings.from_ctx(ctx_with({}))
    assert (s.model, s.batch_size, s.steps, s.optimizer, s.learning_rate) == ("mlp", 128, 1000, "sgd", 0.05)
    assert s.checkpoint_dir == "/r/run/checkpoints"
    assert (s.checkpoint_every_steps, s.checkpoint_every_secs) == (500, 60.0)  # whichever comes first
    assert s.slowdown_of("worker", 1) == 1.0


def test_steps_and_seconds_both_count_and_slowdown_is_per_task() -> None:
    s = TrainSettings.from_ctx(ctx_with({"checkpoint_every_steps": 50, "checkpoint_dir": "/shared/ck",
                                         "slowdown": {"worker:1": 4.0}}))
    assert (s.checkpoint_every_steps, s.checkpoint_every_secs, s.checkpoint_dir) == (50, 60.0, "/shared/ck")
    only_steps = TrainSettings.from_ctx(ctx_with({"checkpoint_every_steps": 50, "checkpoint_every_secs": None}))
    assert (only_steps.checkpoint_every_steps, only_steps.checkpoint_every_secs) == (50, None)
    assert s.slowdown_of("worker", 1) == 4.0 and s.slowdown_of("worker", 0) == 1.0


def test_a_user_command_is_not_the_built_in_trainers_job() -> None:
    with pytest.raises(TaskSetupError, match="command"):
        TrainSettings.from_ctx(ctx_with({"command": "python train.py"}))


def test_only_the_built_in_models_train_in_the_tf2_modes() -> None:
    with pytest.raises(TaskSetupError, match=r'model "mypkg.net:build": the TF2 strategy modes train the built-in'):
        TrainSettings.from_ctx(ctx_with({"model": "mypkg.net:build"}))


def test_step_checkpoints_when_a_multiple_is_crossed() -> None:
    clock = CheckpointClock(100, None)
    clock.saved(0)
    assert [s for s in (1, 99, 100) if clock.due(s)] == [100]
    clock.saved(100)
    assert not clock.due(100) and not clock.due(199)
    assert clock.due(203)  # steps that complete out of order (parameter-server-strategy) skip the multiple
    clock.saved(203)
    assert not clock.due(250) and clock.due(300)


def test_second_checkpoints_follow_the_clock() -> None:
    now = [0.0]
    clock = CheckpointClock(None, 60.0, clock=lambda: now[0])
    now[0] = 59.9
    assert not clock.due(10)
    now[0] = 60.0
    assert clock.due(10)
    clock.saved(10)
    now[0] = 100.0
    assert not clock.due(20)
