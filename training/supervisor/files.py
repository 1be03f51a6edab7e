"""The supervisor's files: atomic JSON writes (readers never see half a file) and tolerant reads."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any


def write_json_atomic(path: str, data: dict[str, Any]) -> None:
    """Readers (probe, status) must never see a half-written file: write a temp file, then rename."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(data, separators=(",", ":")) + "\n")
    os.replace(tmp, path)


def read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
