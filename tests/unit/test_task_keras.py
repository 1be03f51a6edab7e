"""training/task.py skip_eager_keras: built-in models start without Keras' eager load; a user's model module
(which may use tf.keras) and a user's own TF_USE_LEGACY_KERAS keep what TensorFlow does by default. What it
saves is measured in benchmarks/results/task_import.md."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest

from training.task import skip_eager_keras


def _ctx(training: dict[str, Any]) -> Any:
    return SimpleNamespace(plan={"training": training})


@pytest.mark.parametrize("training", [{}, {"model": "mlp"}, {"model": "wide"}])
def test_a_built_in_model_skips_keras(monkeypatch: pytest.MonkeyPatch, training: dict[str, Any]) -> None:
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "")  # recorded: what skip_eager_keras sets is undone after
    monkeypatch.delenv("TF_USE_LEGACY_KERAS")
    skip_eager_keras(_ctx(training))
    assert os.environ["TF_USE_LEGACY_KERAS"] == "1"


def test_a_users_model_module_keeps_keras(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "")  # recorded: what skip_eager_keras sets is undone after
    monkeypatch.delenv("TF_USE_LEGACY_KERAS")
    skip_eager_keras(_ctx({"model": "my_models.net:build"}))
    assert "TF_USE_LEGACY_KERAS" not in os.environ


def test_the_users_own_value_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "0")
    skip_eager_keras(_ctx({"model": "mlp"}))
    assert os.environ["TF_USE_LEGACY_KERAS"] == "0"
