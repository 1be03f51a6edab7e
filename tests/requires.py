"""What a test needs that the machine may lack: a missing piece FAILS the test run, never skips it.

A suite that skips its TensorFlow tests where TensorFlow is missing would pass in CI without having
trained anything. `make test` installs TensorFlow (and TensorBoard); if one is still missing, say so loudly.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest


def _module(name: str, what: str, install: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        pytest.fail(f"{what} is missing ({exc}): run `make test`, or {install}", pytrace=False)


def tensorflow() -> ModuleType:
    """`import tensorflow`, or a collection failure that names what to install."""
    return _module("tensorflow", "TensorFlow", "pip install -e '.[cpu,test]'")


def tensorboard() -> ModuleType:
    """`import tensorboard`, or a collection failure that names what to install (the `tensorboard` extra)."""
    return _module("tensorboard", "tensorboard", "pip install -e '.[tensorboard]'")


# The /bin/sh a host may have: Debian's dash, bash (RHEL, Fedora, Arch: `sh` is bash in POSIX mode) and
# BusyBox's (Alpine, embedded). Found on PATH; scripts/provision installs busybox (`make test` runs it).
POSIX_SHELLS = {"dash": ["dash"], "bash --posix": ["bash", "--posix"], "busybox sh": ["busybox", "sh"]}


def posix_shell(name: str) -> list[str]:
    """The argv that starts shell `name` (a key of POSIX_SHELLS), or a failure naming how to get it."""
    import shutil

    argv = POSIX_SHELLS[name]
    found = shutil.which(argv[0])
    if found is None:
        pytest.fail(f"{argv[0]} is missing (needed to run commands under {name}): run `sh scripts/provision "
                    f"busybox` (`make test` does)", pytrace=False)
    return [found, *argv[1:]]
