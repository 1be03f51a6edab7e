"""TaskContext: what a task reads from its environment and run.json (no TensorFlow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.config.schema import Config
from orchestrator.plan.from_file import plan_config
from training.run.context import TaskContext, TaskSetupError


def write_run(root: Path) -> dict[str, str]:
    plan = plan_config(Config.model_validate({
        "cluster": {"base_port": 30500},
        "hosts": [
            {"name": "p", "address": "10.0.0.2", "roles": ["ps"]},
            {"name": "g", "address": "10.0.0.3", "roles": ["chief", "worker"], "gpus": [0, 1]},
        ],
        "training": {"model": "wide", "model_args": {"params": 100000}, "steps": 7},
    }))
    root.mkdir(parents=True, exist_ok=True)
    (root / "run.json").write_text(json.dumps({"run_id": "r1", "created": 0.0, "plan": plan.to_json()}))
    task = plan.task("worker", 0)
    return {**task.env, "TFCLUSTER_RUN_DIR": str(root)}


def test_reads_its_own_task_and_the_training_settings(tmp_path: Path) -> None:
    env = write_run(tmp_path / "run")
    ctx = TaskContext.from_env(env)
    assert (ctx.job, ctx.index, ctx.host, ctx.mode) == ("worker", 0, "g", "between-graph")
    assert ctx.name == "worker:0"
    assert ctx.device == "/job:worker/task:0/device:GPU:0"  # GPU 0 went to the chief, this is GPU 1
    assert ctx.task_plan["cuda_visible_devices"] == "1"
    assert not ctx.is_chief  # a chief job exists
    assert ctx.num_ps == 1 and ctx.tasks_of("chief") == [0]
    assert ctx.training["model"] == "wide" and ctx.training["steps"] == 7
    assert ctx.events_file == str(tmp_path / "run" / "events" / "worker-0.jsonl")


def test_missing_environment_is_one_clear_error() -> None:
    with pytest.raises(TaskSetupError, match="TFCLUSTER_RUN_DIR"):
        TaskContext.from_env({"TFCLUSTER_JOB": "ps", "TFCLUSTER_TASK": "0"})


def test_missing_or_broken_run_file(tmp_path: Path) -> None:
    env = {"TFCLUSTER_RUN_DIR": str(tmp_path), "TFCLUSTER_JOB": "ps", "TFCLUSTER_TASK": "0"}
    with pytest.raises(TaskSetupError, match=r"run.json"):
        TaskContext.from_env(env)
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(TaskSetupError, match=r"run.json"):
        TaskContext.from_env(env)


def test_a_task_the_plan_does_not_have(tmp_path: Path) -> None:
    env = write_run(tmp_path)
    with pytest.raises(TaskSetupError, match="no task worker:9"):
        TaskContext.from_env({**env, "TFCLUSTER_TASK": "9"})
    with pytest.raises(TaskSetupError, match="not a task index"):
        TaskContext.from_env({**env, "TFCLUSTER_TASK": "x"})


def test_the_resize_serial_says_whether_the_run_was_resized(tmp_path: Path) -> None:
    env = write_run(tmp_path / "run")
    assert TaskContext.from_env(env).resize_serial == 0  # never resized
    run_file = tmp_path / "run" / "run.json"
    for resize, serial in (({"serial": 17, "restart": []}, 17), ({"serial": "x"}, 0), (["odd"], 0)):
        run_file.write_text(json.dumps({**json.loads(run_file.read_text()), "resize": resize}))
        assert TaskContext.from_env(env).resize_serial == serial
