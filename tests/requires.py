"""What a test needs that the machine may lack: a missing piece FAILS the test run, never skips it.

A suite that skips its TensorFlow tests where TensorFlow is missing would pass in CI without having
trained anything. `make test` installs TensorFlow; if it is still missing, say so loudly.
"""

from __future__ import annotations

from types import ModuleType

import pytest


def tensorflow() -> ModuleType:
    """`import tensorflow`, or a collection failure that names what to install."""
    try:
        import tensorflow as tf
    except ImportError as exc:
        pytest.fail(f"TensorFlow is missing ({exc}): run `make test`, or pip install -e '.[cpu,test]'",
                    pytrace=False)
    return tf


def tensorboard() -> ModuleType:
    """`import tensorboard`, or a collection failure that names what to install (the `tensorboard` extra)."""
    try:
        import tensorboard
    except ImportError as exc:
        pytest.fail(f"tensorboard is missing ({exc}): run `make venv`, or pip install -e '.[tensorboard]'",
                    pytrace=False)
    return tensorboard
