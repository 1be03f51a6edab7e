"""TaskCpu: CPU seconds each task of a run has used, read from /proc (Linux). Stdlib only.

For liveness of programs that print no recognised progress: a task whose CPU time moves is working.
`TaskCpu(run_dir).sample()` returns `{"worker-0": {"cpu_s": 12.34, "procs": 2, "stopped": False}, ...}`: for every task
with a live process, the CPU time (user + system, all threads) its processes used while this meter
watched them (a process first seen counts with everything it used before), as a counter that only grows
(across the task's attempts too), how many of its processes live now, and whether one is stopped
(SIGSTOP: alive, using no CPU, going nowhere).

A task's processes are the ones whose environment carries TFCLUSTER_RUN_DIR=<run_dir> and
TFCLUSTER_TASK_ID=<job>-<i>#<attempt> (training/supervisor.py sets both, and children inherit them, so
`sh -c` wrappers, their real programs and reparented leftovers all count).

Cost per sample: one listdir of /proc, one read of /proc/<pid>/environ per process the first time it is
seen (cached by pid; a pid seen again with another start time is read again), and one read of
/proc/<pid>/stat per task process. Known gaps: a process that lives less than one sample interval is not
seen, and what a process used between its last sample and its exit is lost (counting children's times
from their parents' cutime would count the ones seen alive twice).
"""

from __future__ import annotations

import os

from ..run.layout import RUN_DIR_ENV

TASK_ID_ENV = "TFCLUSTER_TASK_ID"
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(proc: str, pid: int) -> tuple[int, int, str] | None:
    """(utime + stime in ticks, start time in ticks since boot, state letter); None for a gone process."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # comm (field 2) may hold spaces and ')': the fields after the last ')' start with field 3 (state)
    fields = raw[raw.rfind(b")") + 2:].split()
    try:
        state = fields[0].decode(errors="replace")  # R, S, D, T (stopped), t (traced), Z...
        return int(fields[11]) + int(fields[12]), int(fields[19]), state  # utime(14), stime(15), starttime(22)
    except (IndexError, ValueError):
        return None


def _environ_marks(proc: str, pid: int, run_dir: bytes) -> tuple[bool, str | None]:
    """(is a process of this run, its TFCLUSTER_TASK_ID or None); (False, None) when unreadable."""
    try:
        with open(f"{proc}/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return False, None
    run_marker = RUN_DIR_ENV.encode() + b"=" + run_dir
    prefix = TASK_ID_ENV.encode() + b"="
    task_id = None
    ours = False
    for item in raw.split(b"\0"):
        if item == run_marker:
            ours = True
        elif item.startswith(prefix):
            task_id = item[len(prefix):].decode(errors="replace")
    return ours, task_id if ours else None


class TaskCpu:
    def __init__(self, run_dir: str, proc: str = "/proc") -> None:
        self.run_dir = run_dir.encode()
        self.proc = proc
        # pid -> (start time, task name) of the run's task processes; (-1, None): not of this run
        self._known: dict[int, tuple[int, str | None]] = {}
        self._ticks: dict[tuple[int, int], int] = {}  # (pid, start) -> CPU ticks at the previous sample
        self._totals: dict[str, int] = {}  # task name -> ticks counted so far

    def sample(self) -> dict[str, dict[str, float | int]]:
        try:
            pids = [int(name) for name in os.listdir(self.proc) if name.isdigit()]
        except OSError:
            return {}
        alive = set(pids)
        for gone in [pid for pid in self._known if pid not in alive]:
            del self._known[gone]
        procs: dict[str, int] = {}
        stopped: set[str] = set()
        ticks_now: dict[tuple[int, int], int] = {}
        for pid in pids:
            known = self._known.get(pid)
            if known is not None and known[1] is None:
                continue  # not of this run (pid reuse within one interval is not noticed)
            stat = _stat(self.proc, pid) if known is not None else None
            if known is not None and stat is not None and stat[1] == known[0]:
                name: str | None = known[1]
            else:
                stat, name = self._learn(pid)
            if stat is None or name is None:
                continue
            key = (pid, stat[1])
            self._totals[name] = self._totals.get(name, 0) + max(stat[0] - self._ticks.get(key, 0), 0)
            ticks_now[key] = stat[0]
            procs[name] = procs.get(name, 0) + 1
            if stat[2] in ("T", "t"):
                stopped.add(name)  # SIGSTOP (or a debugger): alive but going nowhere
        self._ticks = ticks_now
        return {name: {"cpu_s": round(self._totals[name] / _TICKS, 2), "procs": n, "stopped": name in stopped}
                for name, n in sorted(procs.items())}

    def task_of(self, pid: int) -> str | None:
        """The task a live process belongs to, as of the last sample (None: not one of the run's tasks')."""
        known = self._known.get(pid)
        return None if known is None else known[1]

    def pids_of(self, name: str) -> list[int]:
        """A task's live processes, as of the last sample."""
        return [pid for pid, (_, task) in self._known.items() if task == name]

    def _learn(self, pid: int) -> tuple[tuple[int, int, str] | None, str | None]:
        """Read a process's environment: (its stat, its task name) when it is one of the run's tasks."""
        ours, task_id = _environ_marks(self.proc, pid, self.run_dir)
        if not ours:
            self._known[pid] = (-1, None)
            return None, None
        if task_id is None:
            # The supervisor or the agent, or a task between posix_spawn's clone and its exec (it still
            # shows the supervisor's environment): not cached, read again next time.
            return None, None
        stat = _stat(self.proc, pid)
        if stat is None:
            return None, None
        name = task_id.partition("#")[0]
        self._known[pid] = (stat[1], name)
        return stat, name
