"""The supervisor owns every process its tasks start, whatever that process does (Linux).

A task's daemon may leave the run's session and process group (`setsid`) and clear its environment
(`env -i`, so it loses the run's marker that `stop` finds processes by). As a child subreaper
(`prctl(PR_SET_CHILD_SUBREAPER)`, through ctypes), the supervisor inherits every orphaned descendant
instead of init: while it lives, every process its tasks ever started is in its tree, found from the
ppids in /proc (`descendants`), signalled when the run ends or is stopped (`end_descendants`), and
reaped (`reap_orphans`) so no zombie accumulates while the run lives. `stop` kills the same tree in sh
when the supervisor outlives its grace (orchestrator/run/sh_stop.py), and says it cannot know what is
left when the supervisor was not a subreaper or died before it could end its tree.

Stdlib only (ctypes is stdlib); on a system without the prctl, `become_subreaper` is False.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants; False when the kernel refuses (not Linux)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _parents(proc: str = "/proc") -> dict[int, tuple[int, str]]:
    """{pid: (ppid, state)} of every process (one look at each /proc/<pid>/stat)."""
    found: dict[int, tuple[int, str]] = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        # comm may hold spaces and parentheses: after the last ')' come: state ppid ...
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) >= 2 and fields[1].isdigit():
            found[int(name)] = (int(fields[1]), fields[0])
    return found


def descendants(root: int, proc: str = "/proc") -> tuple[list[int], list[int]]:
    """(live descendants of `root`, its zombie children): the live ones at any depth, parents first."""
    parents = _parents(proc)
    live: list[int] = []
    zombies: list[int] = []
    frontier = {root}
    while frontier:
        below = {pid for pid, (ppid, _state) in parents.items() if ppid in frontier}
        frontier = set()
        for pid in sorted(below):
            if parents[pid][1] == "Z":
                if parents[pid][0] == root:
                    zombies.append(pid)  # ours to reap; a zombie has no children
            else:
                live.append(pid)
                frontier.add(pid)
    return live, zombies


def reap_orphans(keep: set[int], proc: str = "/proc") -> list[int]:
    """Reap our zombie children that are not in `keep` (the tasks' own processes, whose exit statuses
    their `Child` collects): orphans inherited as the subreaper. Returns the pids reaped."""
    reaped = []
    for pid in descendants(os.getpid(), proc)[1]:
        if pid in keep:
            continue
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                reaped.append(pid)
    return reaped


def signal_tree(sig: int) -> list[int]:
    """Send `sig` to every live descendant; returns them."""
    live = descendants(os.getpid())[0]
    for pid in live:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    return live


def end_descendants(keep: set[int], timeout: float = 5.0) -> list[int]:
    """SIGKILL every live descendant, again and again (one may fork as it dies; what it forks stays
    ours), reaping the orphans among them (never `keep`), until none is left or `timeout`. Returns what
    was still alive at the end (empty: the tree is gone)."""
    deadline = time.monotonic() + timeout
    while True:
        live = signal_tree(signal.SIGKILL)
        reap_orphans(keep)
        if not live or time.monotonic() >= deadline:
            return live  # after a last round that found none: []
        time.sleep(0.02)
