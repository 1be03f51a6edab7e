"""One running host's side of `tfcluster resize` (orchestrator/run/resize.py), each step one sh command
over the host's transport (no Python started there):
- `run_data`: the run's data from the host's run.json (its id, times, supervisor options and the peer
  channel's key, which only the hosts keep), so new hosts join with the same key;
- `push`: a new run.json, written private under a name of its own writer and renamed into place (the
  supervisor reads it whole or not at all: training/supervisor/resize.py);
- `await_resized`: the host's read (orchestrator/run/read_host.py) until its supervisor says it applied
  the resize, and every task it started for it has run `settle` seconds (or ended with exit 0);
- `left_running`: which of the given tasks still have a process on the host (from /proc, sh_procs.py);
- `ports_taken`: which of the ports a kept host's new tasks get are in use there, tested as `start`'s
  prepare tests them (training/probes/port_probe.py, sent as `python -S -c` source under the host's python):
  a new task whose port is taken would fail for good at once, and with it the run.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Sequence
from typing import Any

from orchestrator.errors import HostError
from orchestrator.run.inline_source import module_source
from orchestrator.run.read_host import HostReading, decode, read_script
from orchestrator.run.remote import RemoteRun
from orchestrator.run.sh_procs import PROC_FUNCTIONS, parse_process
from orchestrator.transport.base import remote_path
from training.run.layout import RUN_DIR_ENV

PORTS_SOURCE = module_source("training.probes.port_probe") + (
    "\nimport json, sys\nprint(json.dumps(taken_ports(json.loads(sys.argv[1]))))\n")
SETTLE_S = 1.0  # as the supervisor's `settle`: a program that fails at once fails the resize
POLL_S = 0.25


def run_data(remote: RemoteRun, timeout: float) -> dict[str, Any]:
    """The host's run.json without its plan (an earlier resize's `resize` field kept: its serial)."""
    result = remote.run_shell(f"cat -- {shlex.quote(remote.layout.run_file)}", timeout)
    if not result.ok:
        raise HostError(remote.host.name, "remote", f"cannot read its run.json: {result.stderr.strip()[-200:]}")
    try:
        data = json.loads(result.stdout)
    except ValueError:
        raise HostError(remote.host.name, "remote", "its run.json is not JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("plan"), dict):
        raise HostError(remote.host.name, "remote", "its run.json is not a tfcluster run file")
    return {k: v for k, v in data.items() if k != "plan"}


def push(remote: RemoteRun, content: bytes, timeout: float) -> None:
    """Replace the host's run.json: written 0600 beside it, then renamed over it."""
    path = remote.layout.run_file
    # Unique per writer: every host's workdir may be one shared (NFS) directory, and two resizes may write at
    # once; the host's name and the writing shell's pid ($$, unique on that host while it runs) tell them apart.
    tmp = shlex.quote(f"{path}.resize.{_safe(remote.host.name)}.") + '"$$".tmp'
    script = f"umask 077\ntmp={tmp}\ncat > \"$tmp\" && chmod 600 \"$tmp\" && mv -f -- \"$tmp\" {shlex.quote(path)}\n"
    result = remote.run_shell(script, timeout, stdin=content)
    if not result.ok:
        raise HostError(remote.host.name, "remote", f"cannot write its run.json: {result.stderr.strip()[-200:]}")


def _safe(name: str) -> str:
    """A host's name as a file name's part (a config name may hold any character)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def await_resized(remote: RemoteRun, serial: int, fresh: Sequence[tuple[str, int]], deadline: float) -> HostReading:
    """Until the supervisor applied resize `serial` and each of `fresh` (job, index) runs: HostError when
    the supervisor is gone, a fresh task failed, or `deadline` (time.monotonic()) passes first."""
    name = remote.host.name
    while True:
        seen = decode(name, remote.run_shell(read_script(remote.layout.root, name, 0), 30.0))
        if seen.absent:
            raise HostError(name, "remote", "its run dir is gone")
        sup = seen.supervisor
        if sup is None or seen.supervisor_alive is False or sup.state not in ("starting", "running"):
            raise HostError(name, "supervisor", "its supervisor is not running (the run ended there?)")
        if sup.resize_serial >= serial and _all_up(name, seen, fresh):
            return seen
        if time.monotonic() >= deadline:
            what = "the supervisor did not take the resize" if sup.resize_serial < serial else "its new tasks"
            raise HostError(name, "timeout", f"{what}: not done in time")
        time.sleep(POLL_S)


def _all_up(host: str, seen: HostReading, fresh: Sequence[tuple[str, int]]) -> bool:
    states = {(t.job, t.task): t for t in seen.tasks}
    now = seen.now or time.time()
    up = 0
    for job, index in fresh:
        t = states.get((job, index))
        if t is None:
            continue
        if (t.final and t.exit_code != 0) or t.state == "restarting":
            how = f"exit code {t.exit_code}" if t.exit_code is not None else f"signal {t.signal}"
            raise HostError(host, "task-failed", f"{job}:{index} exited with {how}" + (f": {t.error}" if t.error else ""))
        if t.final or (t.state == "running" and t.started_at is not None and now - t.started_at >= SETTLE_S):
            up += 1
    return up == len(fresh)


def left_running(remote: RemoteRun, stems: list[str], timeout: float) -> list[str]:
    """`describe` lines (pid, pgid, task id, command) of the run's processes of these tasks (`worker-1`)."""
    if not stems:
        return []
    mark = f"{RUN_DIR_ENV}={remote.layout.root}"
    script = f"mark={shlex.quote(mark)}\n{PROC_FUNCTIONS}\nfor p in $(run_pids); do describe \"$p\"; done\n"
    result = remote.run_shell(script, timeout)
    if not result.ok:
        raise HostError(remote.host.name, "remote", f"cannot list the run's processes: {result.stderr.strip()[-200:]}")
    wanted = set(stems)
    left = []
    for line in result.stdout.splitlines():
        p = parse_process(line)
        if p is not None and p.task.partition("#")[0] in wanted:
            left.append(f"{p.pid} {p.task} {p.args[:60]}")
    return left


def ports_taken(remote: RemoteRun, python: str, wanted: list[list[object]], timeout: float) -> list[tuple[str, int, str]]:
    """`wanted`: [[label, address or "", port], ...] -> the taken ones, (label, port, why)."""
    if not wanted:
        return []
    script = (f"exec {remote_path(python)} -S -c {shlex.quote(PORTS_SOURCE)} "
              f"{shlex.quote(json.dumps(wanted))}\n")
    result = remote.run_shell(script, timeout)
    try:
        return [(str(label), int(port), str(why)) for label, port, why in json.loads(result.stdout)]
    except (ValueError, TypeError):
        raise HostError(remote.host.name, "remote", "cannot test its ports: "
                        f"{(result.stderr or result.stdout).strip()[-200:]}") from None
