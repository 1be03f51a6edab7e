"""A host program sent as the source of `python -c` (training/launcher.py, training/probes/host_probe.py), with
the helper modules it imports from `training` pasted in: nothing of tfcluster is installed on a host
before its code is shipped, yet the helpers stay one real module each, linted and tested here.

A relative import line `from .<...>.<module> import ...` whose module is in INLINED is replaced by that
module's source (which, for this to hold, imports only the standard library), without its `from __future__`
line: the host program has its own, first in the file, and it applies to the pasted code too.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

INLINED = {"port_probe": "training.probes.port_probe", "content_cache": "training.run.content_cache",
           "file_clone": "training.run.file_clone",
           "workdir_probe": "training.probes.workdir_probe", "gpu_check": "training.probes.gpu_check"}
_FUTURE = re.compile(r"^from __future__ import .*\n", re.M)
_IMPORT = re.compile(r"^from \.[\w.]*?(\w+) import (?:\([^)]*\)|.*)$", re.M)  # one line, or a parenthesized list


def module_source(module: str) -> str:
    path = importlib.import_module(module).__file__
    assert path is not None
    return Path(path).read_text(encoding="utf-8")


def standalone_source(module: str) -> str:
    """`module`'s source with its INLINED imports replaced by their modules' sources."""
    def paste(match: re.Match[str]) -> str:
        name = match.group(1)
        return _FUTURE.sub("", module_source(INLINED[name])) if name in INLINED else match.group(0)

    return _IMPORT.sub(paste, module_source(module))
