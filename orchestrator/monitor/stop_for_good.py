"""The orchestrator's side of "stop for good" (training/supervisor/hold.py holds the contract).

One command on the task's host: write the hold file atomically (a temp file renamed over it, so the
supervisor never sees half of one), then SIGTERM the task's process. The hold file comes first: when
the task exits, its supervisor already finds it. Without a pid (the task is waiting to restart) only
the hold file is written; the supervisor checks it before it starts the task again. Every value is a
positional parameter of a fixed script, quoted once by the transport (`shell_command`).
"""

from __future__ import annotations

from training.supervisor.hold import hold_text

KILL_FAILED = 3  # the script's exit code when the hold file was written but the signal could not be sent
# $1 = the hold file, $2 = its content, $3 = the pid to SIGTERM ("" for none)
STOP_SCRIPT = ('set -e; tmp="$1.tmp.$$"; printf \'%s\\n\' "$2" > "$tmp"; mv -f "$tmp" "$1"; '
               f'if [ -n "$3" ]; then kill -s TERM "$3" || exit {KILL_FAILED}; fi')


def stop_for_good_argv(hold_file: str, pid: int | None, at: float) -> list[str]:
    return ["sh", "-c", STOP_SCRIPT, "tfcluster-stop-for-good", hold_file, hold_text(at),
            "" if pid is None else str(int(pid))]
