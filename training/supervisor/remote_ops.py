"""`--probe` and `--stop`: what the orchestrator runs on a host over the transport, one round trip each.

`probe` reports the state files the supervisor keeps and the run's live processes (decoded on the
orchestrator's side by training/telemetry/state_files.py); `stop` TERMs the supervisor, waits `grace`,
then KILLs every process carrying the run's marker until none is left; `stop_verified` adds a fresh
probe taken after that (the verdict `tfcluster stop` reports) and, when nothing of the run is left and
it was asked to, removes the run dir: a whole `stop --purge` in one command.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from typing import TYPE_CHECKING

from ..run.layout import RUN_DIR_ENV, RunLayout
from .files import read_json
from .procfs import proc_environ, proc_pgid, run_processes, signal_pids

if TYPE_CHECKING:
    from typing import Any


def probe(run_dir: str) -> dict[str, Any]:
    """This host's view of the run: supervisor and task state files, and which run processes live."""
    layout = RunLayout(run_dir)
    supervisors: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    if os.path.isdir(layout.state):
        for name in sorted(os.listdir(layout.state)):
            if not name.endswith(".json"):
                continue
            data = read_json(os.path.join(layout.state, name))
            if data is None:
                continue
            if data.get("kind") == "supervisor":
                pid = data.get("pid")
                data["alive"] = isinstance(pid, int) and proc_pgid(pid) is not None and \
                    proc_environ(pid).get(RUN_DIR_ENV) == run_dir
                supervisors.append(data)
            else:
                tasks.append(data)
    report: dict[str, Any] = {"run_dir": run_dir, "exists": os.path.isdir(run_dir), "supervisors": supervisors,
                              "tasks": tasks, "processes": run_processes(run_dir), "now": time.time()}
    host = next((str(s.get("host")) for s in supervisors if s.get("host")), None)
    if host is not None:
        from ..telemetry.host_facts import read_facts

        # What the dashboard's agent would say now, and each task's last progress: `status` judges
        # liveness from the same facts as the dashboard.
        report["facts"] = read_facts(layout, host)
        report["progress"] = {t["job"] + "-" + str(t["task"]): last for t in tasks
                              if (last := last_line(layout.events_file(str(t["job"]), int(t["task"])))) is not None}
    return report


def last_line(path: str, limit: int = 64 * 1024) -> dict[str, Any] | None:
    """The last complete JSON line of a file (its newest event), reading only its end."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            lines = f.read().split(b"\n")
    except OSError:
        return None
    for raw in reversed(lines):
        try:
            data = json.loads(raw)
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    return None


def stop(run_dir: str, grace: float) -> dict[str, Any]:
    """SIGTERM the supervisor(s), wait up to `grace`, then KILL their groups and any run process left."""
    layout = RunLayout(run_dir)
    sup_pids: list[int] = []
    if os.path.isdir(layout.state):
        for name in os.listdir(layout.state):
            if name.startswith("supervisor-") and name.endswith(".json"):
                data = read_json(os.path.join(layout.state, name)) or {}
                pid = data.get("pid")
                if isinstance(pid, int) and proc_environ(pid).get(RUN_DIR_ENV) == run_dir:
                    sup_pids.append(pid)
    signal_pids(sup_pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(proc_pgid(p) is not None for p in sup_pids):
        time.sleep(0.05)
    killed: list[int] = []
    for _ in range(20):  # KILL until nothing is left (a fork may race with the scan)
        left = run_processes(run_dir)
        if not left:
            break
        groups = {p["pgid"] for p in left}
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        pids = [p["pid"] for p in left]
        signal_pids(pids, signal.SIGKILL)
        killed.extend(pids)
        time.sleep(0.05)
    return {"run_dir": run_dir, "terminated": sup_pids, "killed": sorted(set(killed)),
            "remaining": run_processes(run_dir)}


def stop_verified(run_dir: str, grace: float, purge: bool) -> dict[str, Any]:
    """`stop`, then `probe` from scratch; the run dir removed (`purge`) only if no process is left."""
    report = stop(run_dir, grace)
    seen = probe(run_dir)
    report["verified"] = seen
    report["purged"] = False
    if purge and not seen["processes"]:
        shutil.rmtree(run_dir, ignore_errors=True)
        report["purged"] = not os.path.exists(run_dir)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(run_dir))  # the run's directory, once no other host has a part in it
    return report
