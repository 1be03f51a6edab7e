"""`stop` when the host's python cannot run (its `[remote] python` moved, was removed or broke after the
start): the same stop, verify and purge as `training.supervisor --stop --verify --purge`, in /bin/sh and
the tools every Linux host has (`tr`, `grep`, `kill`, `rm`), so a run can always be stopped and purged.

A process belongs to the run when its environment has the line `TFCLUSTER_RUN_DIR=<run dir>` (the same
marker training/supervisor/procfs.py reads): every one found is sent SIGTERM, given `grace` seconds, then
SIGKILL until none is left (a few rounds: a fork may race with the scan); then a fresh scan is the
verdict, and with `purge` the host's run dir is removed only when that scan found nothing (and the run's
directory above it once it is empty: hosts sharing a workdir each remove only their own part).
Output, one item a line: `KILLED <pid>`, `LEFT <pid> <pgid> <args>`, `PURGED`, `ABSENT` (no run dir).
"""

from __future__ import annotations

import math
import shlex

from orchestrator.errors import HostError
from orchestrator.transport.base import CommandResult
from training.run.layout import RUN_DIR_ENV
from training.telemetry.state_files import ProbeReport, RunProcess, StopReport

KILL_ROUNDS = 5

# $1 = the marker line, $2 = the run dir, $3 = grace (whole seconds), $4 = 1 to purge
_SCRIPT = r"""
mark=$1; rd=$2; grace=$3; purge=$4
found() {
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}; p=${p%/environ}
    [ "$p" = "$$" ] && continue
    tr '\000' '\n' < "$e" 2>/dev/null | grep -qxF -- "$mark" && echo "$p"
  done
}
[ -d "$rd" ] || { left=$(found); [ -z "$left" ] && { echo ABSENT; exit 0; }; }
pids=$(found)
if [ -n "$pids" ]; then
  kill -s TERM $pids 2>/dev/null
  i=0
  while [ "$i" -lt "$grace" ] && [ -n "$(found)" ]; do sleep 1; i=$((i + 1)); done
fi
for p in $pids; do echo "KILLED $p"; done
r=0
while [ "$r" -lt @ROUNDS@ ]; do
  left=$(found); [ -z "$left" ] && break
  for p in $left; do kill -s KILL "$p" 2>/dev/null; echo "KILLED $p"; done
  sleep 1; r=$((r + 1))
done
left=$(found)
for p in $left; do
  g=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -d' ' -f3)
  a=$(tr '\000' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-200)
  echo "LEFT $p ${g:-0} $a"
done
if [ "$purge" = 1 ] && [ -z "$left" ]; then
  rm -rf -- "$rd" && [ ! -e "$rd" ] && echo PURGED
  rmdir -- "${rd%/*}" 2>/dev/null  # the run's directory, once no other host has a part in it
fi
exit 0
""".replace("@ROUNDS@", str(KILL_ROUNDS))


def sh_stop_script(run_dir: str, grace: float, purge: bool) -> str:
    """The whole stop as one shell command (every value quoted)."""
    args = [f"{RUN_DIR_ENV}={run_dir}", run_dir, str(max(0, math.ceil(grace))), "1" if purge else "0"]
    return f"set -- {' '.join(shlex.quote(a) for a in args)}\n{_SCRIPT}"


def parse_sh_stop(host: str, result: CommandResult) -> tuple[StopReport, ProbeReport | None, bool]:
    """(what was signalled, what is left as a probe would say it (None: no run dir), purged)."""
    if not result.ok:
        raise HostError(host, "remote", f"the /bin/sh stop failed (exit {result.exit_code}): "
                        f"{result.stderr.strip()[-200:]}")
    lines = result.stdout.splitlines()
    if "ABSENT" in lines:
        return StopReport(absent=True), None, False
    killed = sorted({int(line.split()[1]) for line in lines if line.startswith("KILLED ")})
    left = []
    for line in lines:
        if line.startswith("LEFT "):
            _, pid, pgid, *args = [*line.split(" ", 3), ""]
            left.append(RunProcess(pid=int(pid), pgid=int(pgid), task="", args=args[0]))
    report = StopReport(killed=tuple(killed), remaining=tuple(left))
    return report, ProbeReport(processes=tuple(left)), "PURGED" in lines
