"""Why a task's process ended, in one line, from the end of its own log: what `status`, the dashboard's
event log and `dash --once --json` show beside an exit or a restart (a full disk, an import error, a
lost connection), so nobody has to open the log to learn it. Stdlib only."""

from __future__ import annotations

import os
import re

TAIL_BYTES = 16384
MAX_CHARS = 200
# A Python exception line (`OSError: [Errno 28] No space left on device`), TF's own status lines
# (`tensorflow.python.framework.errors_impl.UnavailableError: ...`) and a shell's `...: not found`.
_ERROR = re.compile(r"(\w+(Error|Exception|Exit)\b.*|.*\b(error|not found|No such file|Killed)\b.*)", re.I)
# A built-in task's own log line (training/task.py `configure_logging`): the time, level and task name
# repeat what status already shows, and would take the room of the message.
_TASK_LOG_PREFIX = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ \[[^\]]*\] ")


def exit_reason(log_path: str) -> str | None:
    """The last error-looking line of the log's tail, else its last line; tfcluster's own notes skipped."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - TAIL_BYTES))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    lines = [line.strip() for line in tail.replace("\r", "\n").splitlines()]
    lines = [line for line in lines if line and not line.startswith("--- tfcluster:")]
    if not lines:
        return None
    errors = [line for line in lines if _ERROR.fullmatch(line)]
    line = (errors or lines)[-1]
    prefix = _TASK_LOG_PREFIX.match(line)
    line = line[prefix.end():] if prefix else line
    return line if len(line) <= MAX_CHARS else line[: MAX_CHARS - 1] + "…"
