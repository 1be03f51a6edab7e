"""Paramiko without `invoke` at start-up: `paramiko.config` imports the `invoke` package (most of
Paramiko's own import time, `python -X importtime`, issue 24) but uses it only to
run the command of a `Match exec` line in an ssh config file. `defer_invoke()` puts a stand-in into
`sys.modules` that imports the real package the first time anything of it is used, so such a line
still works and every other command no longer pays for it. Called before Paramiko is first imported
(orchestrator/transport/__init__.py, orchestrator/config/ssh_config.py).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

NAME = "invoke"


class _Deferred(types.ModuleType):
    def __getattr__(self, attribute: str) -> object:
        if sys.modules.get(NAME) is self:
            del sys.modules[NAME]
        return getattr(importlib.import_module(NAME), attribute)


def defer_invoke() -> None:
    if NAME in sys.modules:
        return
    spec = importlib.util.find_spec(NAME)
    if spec is None:
        return  # not installed: paramiko handles that itself
    stand_in = _Deferred(NAME)
    stand_in.__spec__ = spec
    sys.modules[NAME] = stand_in
