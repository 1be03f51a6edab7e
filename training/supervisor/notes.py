"""The `--- tfcluster:` notes the supervisor appends to a task's log, where the user reads them (`logs`,
the dashboard's log view, `pull`). They name a task as users know it, `job:index` (`worker:1`); the
`<job>-<index>` form is storage only (file names, state keys, the task marker). The progress tailer
(training/progress/tailer.py) recognises the start note, so its wording is a contract. Stdlib only."""

from __future__ import annotations

PREFIX = "--- tfcluster: "


def task_label(job: str, index: int) -> str:
    """The name users read: `worker:1`."""
    return f"{job}:{index}"


def line(text: str) -> bytes:
    return f"{PREFIX}{text}\n".encode()


def starting(label: str, attempt: int, when: str) -> str:
    return f"starting {label} (attempt {attempt}) at {when}"


def cannot_start(label: str, why: object) -> str:
    return f"cannot start {label}: {why}"


def held(label: str) -> str:
    return f"{label} was stopped for good by the user (not restarted; not a failure)"


def group_restart(epoch: int, cause: str) -> str:
    return f"group restart {epoch}: {cause}"


def how(code: int | None, sig: int | None) -> str:
    return f"code {code}" if code is not None else f"signal {sig}"


def exited(label: str, how: str) -> str:
    return f"{label} exited ({how})"


def log_rotated(previous: str, cap_mb: float) -> str:
    return f"log continued: it reached {cap_mb:g} MB ([training] max_log_mb); the lines before are in {previous}"
