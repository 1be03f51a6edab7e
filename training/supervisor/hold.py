"""Stop for good: the hold file contract between the orchestrator and the supervisor. Stdlib only.

When the user stops a task for good (the dashboard's `x`), the orchestrator runs one command on the
task's host that writes `state/<job>-<task>.hold` (RunLayout.hold_file: atomically, `hold_text`),
then SIGTERMs the task. The supervisor checks the file whenever the task exits and before it starts
the task again after a backoff: a held task is final (never restarted), recorded as `exited` with
`held: true`, and it is not a failure (`status` does not count it; the run can still end `finished`).
A held built-in finisher that did not exit 0 gets the stand-in (training/stand_in.py) like any
finisher that failed for good, so the serving tasks stop waiting for it.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from training.layout import RunLayout

HOLD_REASON = "stopped by the user"


def hold_text(at: float) -> str:
    """The hold file's content: one JSON line with the time (unix seconds) and the reason."""
    return json.dumps({"held_at": round(at, 3), "reason": HOLD_REASON}, separators=(",", ":"))


def is_held(layout: RunLayout, job: str, index: int) -> bool:
    return os.path.exists(layout.hold_file(job, index))
