"""What /proc says about a run's processes (Linux): the environment marker that makes a process part of a
run, its process group, its command line. `run_processes` is how the supervisor and the agent find every
process of a run, orphans included (`stop` and `status` apply the same rule in sh: orchestrator/run/
sh_procs.py). Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

from ..run.layout import RUN_DIR_ENV

if TYPE_CHECKING:
    from typing import Any

TASK_ID_ENV = "TFCLUSTER_TASK_ID"  # "<job>-<index>#<attempt>": finds a task's leftover children


def proc_environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def proc_pgid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # comm may contain spaces and parentheses: fields after the last ')' are: state ppid pgrp ...
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) < 3 or fields[0] == "Z":
        return None  # zombies hold no resources; their parent reaps them
    return int(fields[2])


def proc_cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def run_processes(run_dir: str, exclude: set[int] | None = None) -> list[dict[str, Any]]:
    """Every live process whose environment marks it as part of this run (the supervisor, its tasks,
    and anything they spawned, even if reparented)."""
    exclude = exclude or set()
    me = os.getpid()
    found = []
    for pid in all_pids():
        if pid == me or pid in exclude:
            continue
        env = proc_environ(pid)
        if env.get(RUN_DIR_ENV) != run_dir:
            continue
        pgid = proc_pgid(pid)
        if pgid is None:
            continue
        found.append({"pid": pid, "pgid": pgid, "task": env.get(TASK_ID_ENV, ""), "args": proc_cmdline(pid)})
    return found


def signal_pids(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
