"""The state file of a run's open TensorBoard: how another process learns its URL (`dash --once --json`,
the dashboard's key, a second `tfcluster tensorboard`) instead of opening a second one.

`<run's local dir>/tensorboard.json` (orchestrator/run/records.local_dir: beside the run record, removed
with it), 0600, written atomically by the process that opened the board (orchestrator/results/board.py)
and removed by it when it closes: {"url", "pid" (that process), "server_pid" (TensorBoard's), "started"}.
A file whose processes are gone (the opener was SIGKILLed) is stale: `find_open` ignores it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.run import records

STATE_FILE = "tensorboard.json"


@dataclass(frozen=True)
class OpenBoard:
    url: str
    pid: int  # the process that follows the files (`tfcluster tensorboard`, a dashboard)
    server_pid: int
    started: float


def state_path(run_id: str) -> Path:
    return records.local_dir(run_id) / STATE_FILE


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def find_open(run_id: str) -> OpenBoard | None:
    """The run's open board, if its state file names live processes."""
    try:
        data = json.loads(state_path(run_id).read_text(encoding="utf-8"))
        board = OpenBoard(str(data["url"]), int(data["pid"]), int(data["server_pid"]), float(data["started"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return board if _alive(board.pid) and _alive(board.server_pid) else None


def write(run_id: str, url: str, server_pid: int) -> None:
    path = state_path(run_id)
    tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"url": url, "pid": os.getpid(), "server_pid": server_pid, "started": time.time()}, f)
    os.replace(tmp, path)


def remove_mine(run_id: str) -> None:
    """Remove the state file if this process wrote it (another may have opened a board since)."""
    path = state_path(run_id)
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
            path.unlink()
