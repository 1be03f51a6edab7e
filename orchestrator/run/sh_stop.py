"""`stop` on one host in ONE command that starts no Python there: stop, verify and (`--purge`) remove the
run dir, in /bin/sh and the tools every Linux host has (`grep`, `tr`, `kill`, `rm`), so a run stops the
same way whether or not the host's python still runs, and a busy host is never asked to start one.

The supervisor is asked first (SIGTERM; it stops its tasks and records them `stopped_by = "stop"`) and
given `grace` seconds to exit; a run without a live supervisor gets SIGTERM on every one of its
processes instead (a process belongs to the run when its environment carries `TFCLUSTER_RUN_DIR=<run
dir>`, sh_procs.py), and the same grace. Then SIGKILL, to each process and its process group, until
none is left (a few rounds: a fork may race with the scan); a fresh scan is the verdict, and with
`purge` the host's run dir is removed only when that scan found nothing (and the run's directory
above it once it is empty: hosts sharing a workdir each remove only their own part).
A task's daemon may leave the run's session and clear its environment (`env -i setsid ...`): no marker
finds it, but the supervisor, a child subreaper (training/supervisor/subreaper.py), owns it and ends it
with its tasks. A supervisor that outlives the grace gets its tree (`tree`: ppids in /proc) SIGKILLed
before itself, while it still holds every orphan. Only then is "nothing left" known: when a supervisor
was not a subreaper, or died before the stop without ending its processes, the stop says so (`UNSURE`).
Output, one item a line: `TERMINATED <pid>`, `KILLED <pid>`, `LEFT <describe>`, `UNSURE <why>`, `PURGED`,
`ABSENT` (no run dir and no process).
"""

from __future__ import annotations

import math
import shlex

from orchestrator.errors import HostError
from orchestrator.run.sh_procs import PROC_FUNCTIONS, parse_process
from orchestrator.transport.base import CommandResult
from training.run.layout import RUN_DIR_ENV
from training.telemetry.state_files import StopReport

KILL_ROUNDS = 5

# $1 = the marker line, $2 = the run dir, $3 = grace (tenths of a second), $4 = 1 to purge
_SCRIPT = r"""
mark=$1; rd=$2; grace=$3; purge=$4
@PROCS@
nap() { sleep 0.1 2>/dev/null || sleep 1; }
[ -d "$rd" ] || { [ -z "$(run_pids)" ] && { echo ABSENT; exit 0; }; }
sup=
for f in "$rd"/state/supervisor-*.json; do
  [ -f "$f" ] || continue
  IFS= read -r s < "$f"; p=${s#*\"pid\":}; p=${p# }; p=${p%%[!0-9]*}
  [ -n "$p" ] && has_mark "$p" && sup="$sup $p"
done
if [ -n "$sup" ]; then
  kill -s TERM $sup 2>/dev/null; for p in $sup; do echo "TERMINATED $p"; done
  i=0
  while [ "$i" -lt "$grace" ]; do
    up=; for p in $sup; do has_mark "$p" && up=1; done
    [ -z "$up" ] && break; nap; i=$((i + 1))
  done
  # A supervisor that outlived its grace: its tree first, while it still holds every orphan (a subreaper)
  r=0
  while [ "$r" -lt @ROUNDS@ ]; do
    up=; for p in $sup; do has_mark "$p" && up="$up $p"; done
    t=; [ -n "$up" ] && t=$(tree $up)
    [ -z "$t" ] && break
    for p in $t; do kill -s KILL "$p" 2>/dev/null; echo "KILLED $p"; done
    nap; r=$((r + 1))
  done
else
  pids=$(run_pids)
  if [ -n "$pids" ]; then
    kill -s TERM $pids 2>/dev/null; for p in $pids; do echo "TERMINATED $p"; done
    i=0; while [ "$i" -lt "$grace" ] && [ -n "$(run_pids)" ]; do nap; i=$((i + 1)); done
  fi
fi
own=$(describe $$); own=${own#* }; own=${own%% *}
r=0
while [ "$r" -lt @ROUNDS@ ]; do
  left=$(run_pids); [ -z "$left" ] && break
  for p in $left; do
    d=$(describe "$p"); g=${d#* }; g=${g%% *}
    [ -n "$g" ] && [ "$g" -gt 1 ] && [ "$g" != "$own" ] && kill -s KILL -- "-$g" 2>/dev/null
    kill -s KILL "$p" 2>/dev/null; echo "KILLED $p"
  done
  nap; r=$((r + 1))
done
left=$(run_pids)
for p in $left; do echo "LEFT $(describe "$p")"; done
# What no marker finds (a process that left the run's session and environment) is found only in a
# supervisor's tree: only a subreaper supervisor alive at the stop, or one that ended by itself, vouches.
for f in "$rd"/state/supervisor-*.json; do
  [ -f "$f" ] || continue
  IFS= read -r s < "$f"; p=${s#*\"pid\":}; p=${p# }; p=${p%%[!0-9]*}
  case $s in
    *'"subreaper":true'*) ;;
    *) echo "UNSURE its supervisor could not own every process its tasks started (no child subreaper)"; continue ;;
  esac
  case " $sup " in *" $p "*) continue ;; esac
  case $s in *'"ended_at":null'*) echo "UNSURE its supervisor died before it ended its processes" ;; esac
done
if [ "$purge" = 1 ] && [ -z "$left" ]; then
  rm -rf -- "$rd" && [ ! -e "$rd" ] && echo PURGED
  rmdir -- "${rd%/*}" 2>/dev/null  # the run's directory, once no other host has a part in it
fi
exit 0
""".replace("@PROCS@", PROC_FUNCTIONS).replace("@ROUNDS@", str(KILL_ROUNDS))


def sh_stop_script(run_dir: str, grace: float, purge: bool) -> str:
    """The whole stop as one shell command (every value quoted)."""
    args = [f"{RUN_DIR_ENV}={run_dir}", run_dir, str(max(0, math.ceil(grace * 10))), "1" if purge else "0"]
    return f"set -- {' '.join(shlex.quote(a) for a in args)}\n{_SCRIPT}"


def parse_sh_stop(host: str, result: CommandResult) -> tuple[StopReport, bool]:
    """(what was signalled and what is left, purged)."""
    if not result.ok:
        raise HostError(host, "remote", f"the stop failed (exit {result.exit_code}): {result.stderr.strip()[-200:]}")
    lines = result.stdout.splitlines()
    if "ABSENT" in lines:
        return StopReport(absent=True), False

    def pids(word: str) -> tuple[int, ...]:
        return tuple(sorted({int(line.split()[1]) for line in lines if line.startswith(word + " ")}))

    left = tuple(p for line in lines if line.startswith("LEFT ") and (p := parse_process(line[5:])) is not None)
    unsure = next((line[len("UNSURE "):] for line in lines if line.startswith("UNSURE ")), "")
    return (StopReport(terminated=pids("TERMINATED"), killed=pids("KILLED"), remaining=left, unsure=unsure),
            "PURGED" in lines)
