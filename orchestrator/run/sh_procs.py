"""A run's processes, found from /proc in POSIX sh, for the scripts that read or stop a run without any
Python on the host (read_host.py, sh_stop.py): the same rule as training/supervisor/procfs.py, a process
belongs to the run when its environment holds the line `TFCLUSTER_RUN_DIR=<run dir>`.

`PROC_FUNCTIONS` defines, for a script that has set `mark` to that line:
- `has_mark PID`: whether the process is one of the run's (one `grep -z`; `tr | grep` where grep has no -z);
- `run_pids`: every pid of the run but the script's own, one a line (one `grep` over every process's
  environment: the one-process-a-time loop only where grep has no -z);
- `tree PID...`: every live descendant of those processes, at any depth, one a line (from the ppids in
  /proc/<pid>/stat: what a subreaper supervisor owns, markers or not);
- `describe PID`: `<pid> <pgid> <TFCLUSTER_TASK_ID or -> <command line>`, decoded by `parse_process`.

`signal_script` signals one pid the way the dashboard's restart and kill keys do, only while it is still a
process of the run (a pid read a tick ago may be another process's by now).
"""

from __future__ import annotations

import shlex

from training.run.layout import RUN_DIR_ENV
from training.telemetry.state_files import RunProcess

PROC_FUNCTIONS = r"""
has_mark() {
  grep -qzxF -- "$mark" "/proc/$1/environ" 2>/dev/null
  case $? in 0) return 0 ;; 1) return 1 ;; esac
  tr '\000' '\n' 2>/dev/null < "/proc/$1/environ" | grep -qxF -- "$mark"
}
run_pids() {
  if printf 'x\000' | grep -qzxF x 2>/dev/null; then
    for e in $(grep -lzxF -- "$mark" /proc/[0-9]*/environ 2>/dev/null); do
      p=${e#/proc/}; p=${p%/environ}; [ "$p" = "$$" ] || echo "$p"
    done
  else
    for e in /proc/[0-9]*/environ; do
      p=${e#/proc/}; p=${p%/environ}; [ "$p" = "$$" ] && continue
      tr '\000' '\n' 2>/dev/null < "$e" | grep -qxF -- "$mark" && echo "$p"
    done
  fi
}
tree() {
  set -- " $* " ""; all=
  for st in /proc/[0-9]*/stat; do
    IFS= read -r l 2>/dev/null < "$st" || continue
    l=${l##*) }; s=${l%% *}; l=${l#* }; pp=${l%% *}; p=${st#/proc/}
    [ "$s" = Z ] || all="$all ${p%/stat}:$pp"
  done
  while :; do
    more=
    for e in $all; do
      case $1 in *" ${e#*:} "*) case $1 in *" ${e%:*} "*) ;; *) more="$more ${e%:*}" ;; esac ;; esac
    done
    [ -z "$more" ] && break
    set -- "$1$more " "$2$more"
  done
  for p in $2; do echo "$p"; done
}
describe() {
  IFS= read -r s 2>/dev/null < "/proc/$1/stat" || return 0
  g=${s##*) }; g=${g#* }; g=${g#* }; g=${g%% *}
  t=$(tr '\000' '\n' 2>/dev/null < "/proc/$1/environ" | sed -n 's/^TFCLUSTER_TASK_ID=//p')
  a=$(tr '\000' ' ' 2>/dev/null < "/proc/$1/cmdline" | cut -c1-200)
  echo "$1 ${g:-0} ${t:--} $a"
}
"""


def parse_process(text: str) -> RunProcess | None:
    """`describe`'s line; None for anything else."""
    pid, pgid, task, *args = [*text.split(" ", 3), ""][:4]
    if not (pid.isdigit() and pgid.lstrip("-").isdigit()):
        return None
    return RunProcess(pid=int(pid), pgid=int(pgid), task="" if task == "-" else task, args=args[0].strip())


SIGNAL_MARK = "not a process of this run (any more)"  # its refusal, and what the scripted hosts know it by


def signal_script(run_dir: str, pid: int, sig: str) -> str:
    """`kill -s SIG PID` in sh, refused (exit 1, one line) unless PID carries the run's marker."""
    if not sig.isalnum():
        raise ValueError(f"not a signal name: {sig!r}")
    args = " ".join(shlex.quote(a) for a in (f"{RUN_DIR_ENV}={run_dir}", str(int(pid)), sig))
    return (f"set -- {args}\nmark=$1\n{PROC_FUNCTIONS}\n"
            f'has_mark "$2" || {{ echo "pid $2: {SIGNAL_MARK}" >&2; exit 1; }}\nkill -s "$3" "$2"\n')
