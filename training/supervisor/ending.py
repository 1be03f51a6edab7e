"""How the supervisor ends its processes when the run ends or is stopped: SIGTERM to every task, to
every process of its group and (as the subreaper, training/supervisor/subreaper.py) to every
descendant, however it left the session or cleared its environment; `grace` for them to exit; then
SIGKILL to the tasks' processes (they carry a task marker), the group and the whole tree, until
nothing of it is left. Never the launcher still relaying our states to `start`: it is our parent, in
another group, and carries the run marker only. `term_wait_kill` ends some tasks only (a group restart,
a resize dropping or restarting tasks: training/supervisor/core.py, resize.py). Stdlib only.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from .procfs import run_processes, signal_pids
from .subreaper import descendants, end_descendants, reap_orphans, signal_tree

if TYPE_CHECKING:
    from .children import Child

KILL_ROUNDS_S = 5.0  # how long the tree gets to be gone after SIGKILL (a process in D state waits for I/O)


def end_processes(run_dir: str, task_pids: list[int], grace: float) -> list[int]:
    """TERM, `grace` (shorter once the tasks and the tree are gone), KILL; returns the descendants
    still alive at the end (empty: every one is gone; the tasks' own zombies are left for their
    `Child` to collect)."""
    me = os.getpgid(0)
    group = [p["pid"] for p in run_processes(run_dir) if p["pgid"] == me]
    signal_pids(sorted(set(task_pids) | set(group)), signal.SIGTERM)
    signal_tree(signal.SIGTERM)
    keep = set(task_pids)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and descendants(os.getpid())[0]:  # the tasks are in the tree
        reap_orphans(keep)  # a daemon that obeyed the TERM is gone, not a zombie
        time.sleep(0.05)
    signal_pids([p["pid"] for p in run_processes(run_dir) if p["task"] or p["pgid"] == me], signal.SIGKILL)
    return end_descendants(keep, KILL_ROUNDS_S)


def term_wait_kill(children: Sequence[Child], grace: float, also: Iterable[int] = ()) -> None:
    """SIGTERM to these task processes (and `also`: say, the program a `sh -c` task started), up to `grace`
    for every one of them to exit, then SIGKILL to each still running. Not reaped here: by the caller's
    `Child.wait`, or by the supervisor's next look at its tasks."""
    signal_pids(sorted({c.pid for c in children} | set(also)), signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(c.poll() is None for c in children):
        time.sleep(0.05)
    signal_pids([c.pid for c in children if c.poll() is None], signal.SIGKILL)


def kill_leftovers(run_dir: str, attempt: str) -> None:
    """A task run through `sh -c` may leave its real program behind (holding the TF port): SIGKILL what
    carries this attempt's marker (`<job>-<index>#<attempt>`)."""
    signal_pids([p["pid"] for p in run_processes(run_dir) if p["task"] == attempt], signal.SIGKILL)
