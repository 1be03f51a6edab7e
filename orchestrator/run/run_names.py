"""What a run may be called: the user's `start --run NAME` (checked: it becomes a file name in the state
directory and a path on every host, and an argument of `status`, `logs`, `stop`), or a generated id.
Each refusal says the one reason that name fails, in one line."""

from __future__ import annotations

import re
import secrets
import time

from orchestrator.errors import UsageError

RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def run_name_problem(name: str) -> str | None:
    """Why `name` cannot be a run's name (it becomes a file name, and an argument of other commands), or None."""
    if RUN_NAME.match(name):
        return None
    if not name:
        return "a run name cannot be empty"
    if name in (".", ".."):
        return f"{name!r} is not a run name (it names a directory)"
    if name[0] == "-":
        return "a run name must not start with '-' (it would read as an option)"
    bad = next((c for c in name if not (c.isascii() and (c.isalnum() or c in "_.-"))), None)
    if bad is not None:
        return f"{bad!r} is not allowed in a run name (letters, digits, '.', '_' and '-')"
    if len(name) > 100:
        return f"a run name is at most 100 characters, not {len(name)}"
    return f"a run name must start with a letter or a digit, not {name[0]!r}"


def check_run_name(name: str) -> None:
    """UsageError (one line) unless `name` can name a run (`start --run NAME`)."""
    problem = run_name_problem(name)
    if problem is not None:
        raise UsageError(f"--run {name!r}: {problem}")


def new_run_id(cluster: str, name: str | None = None, now: float | None = None) -> str:
    """`<cluster>-<yyyymmdd-hhmmss>-<4 hex>`, or the user's `--run NAME` (checked: it becomes a path)."""
    if name is not None:
        check_run_name(name)
        return name
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    safe_cluster = re.sub(r"[^A-Za-z0-9_.-]", "-", cluster) or "run"
    return f"{safe_cluster}-{stamp}-{secrets.token_hex(2)}"
