"""Everything `status`, `dash --once` and the dashboard's first frame need from one host, in ONE command
that starts no Python there: a POSIX sh script of `head`, `tail` and builtins over what the host's
supervisor keeps in the run dir (training/run/layout.py), whatever the number of tasks.

It reads:
- `state/*.json`: the supervisor's state file and each task's (one JSON line each, atomically renamed);
- `state/host-<host>.facts`: each task's process count, CPU time, SIGSTOP, port (written every second
  by the supervisor, training/telemetry/host_facts.py);
- the last lines of each task's `events/<job>-<i>.jsonl`: its newest progress events, whose counts
  and times give its current rates without waiting for new ones;
- whether the supervisor lives (its pid carries the run's marker), and when it does not, the run's
  processes from /proc (its facts then stopped changing: what still runs is counted, sh_procs.py);
- the host's clock, so ages are measured on the host's own time.

Output: `@@tfc <word> ...` lines, and `head`/`tail`'s own `==> <path> <==` headers before each file's
lines (`/dev/null` is always among the files, so there is a header even for one file). `decode` is its
one typed decoder: state files through training/telemetry/state_files.py (a task's is its TaskRecord:
training/telemetry/task_record.py); facts and progress lines stay raw JSON for the monitor's event
decoder (orchestrator/monitor/events.py). A damaged file is named in `damaged` and skipped; it never
hides the others.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import HostError
from orchestrator.run.sh_procs import PROC_FUNCTIONS, parse_process
from orchestrator.transport.base import CommandResult
from training.run.layout import RUN_DIR_ENV
from training.telemetry.state_files import RunProcess, SupervisorStateFile, decode_state_line
from training.telemetry.task_record import TaskRecord
from training.telemetry.wire import StateFileError

PROGRESS_LINES = 3  # per task: two progress events give a rate (and a line being written may be cut)
MARK = "@@tfc "

# $1 = the run dir, $2 = the host's name, $3 = the marker line, $4 = progress lines per task
_SCRIPT = r"""
rd=$1; host=$2; mark=$3; n=$4
@PROCS@
echo "@@tfc now $(date +%s.%N)"
cd "$rd" 2>/dev/null || { echo "@@tfc absent"; exit 0; }
head -n 1 -- /dev/null state/*.json "state/host-$host.facts" 2>/dev/null; echo
set --
for f in events/*.jsonl; do case ${f##*/} in supervisor-*|'*.jsonl') ;; *) set -- "$@" "$f" ;; esac; done
tail -n "$n" -- /dev/null "$@" 2>/dev/null; echo
pid=
if [ -f "state/supervisor-$host.json" ]; then
  IFS= read -r s < "state/supervisor-$host.json"; pid=${s#*\"pid\":}; pid=${pid# }; pid=${pid%%[!0-9]*}
fi
if [ -n "$pid" ] && has_mark "$pid"; then echo "@@tfc alive $pid"; exit 0; fi
echo "@@tfc dead ${pid:--}"
for p in $(run_pids); do echo "@@tfc proc $(describe "$p")"; done
exit 0
""".replace("@PROCS@", PROC_FUNCTIONS)


def read_script(run_dir: str, host: str, progress_lines: int = PROGRESS_LINES) -> str:
    """The whole read as one shell command (every value quoted)."""
    args = [run_dir, host, f"{RUN_DIR_ENV}={run_dir}", str(int(progress_lines))]
    return f"set -- {' '.join(shlex.quote(a) for a in args)}\n{_SCRIPT}"


@dataclass(frozen=True)
class HostReading:
    """One host's side of a run as one read saw it; `absent`: no run dir there."""

    absent: bool = False
    now: float | None = None  # the host's clock when it was read
    supervisor: SupervisorStateFile | None = None
    supervisor_alive: bool | None = None  # None: no supervisor state file (yet)
    tasks: tuple[TaskRecord, ...] = ()
    facts: dict[str, Any] = field(default_factory=dict)  # the facts file, raw (its "tasks" by file stem)
    progress: dict[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)  # stem -> newest lines
    processes: tuple[RunProcess, ...] | None = None  # counted from /proc: only when the supervisor is dead
    damaged: tuple[str, ...] = ()  # files that did not decode


class _Files:
    """The lines of each file in head/tail's output, by path."""

    def __init__(self) -> None:
        self.lines: dict[str, list[str]] = {}
        self.current: list[str] | None = None

    def take(self, line: str) -> None:
        if line.startswith("==> ") and line.endswith(" <=="):
            self.current = self.lines.setdefault(line[4:-4], [])
        elif self.current is not None and line.strip():
            self.current.append(line)


def _json(line: str) -> object:
    return json.loads(line)


def decode(host: str, result: CommandResult) -> HostReading:
    """The script's output as a HostReading; HostError when the command itself failed."""
    if not result.ok:
        raise HostError(host, "remote", f"reading the run failed (exit {result.exit_code}): "
                        f"{result.stderr.strip()[-200:]}")
    files, words = _Files(), {}
    processes: list[RunProcess] = []
    for line in result.stdout.splitlines():
        if line.startswith(MARK):
            word, _, rest = line[len(MARK):].partition(" ")
            words[word] = rest
            files.current = None
            if word == "proc" and (p := parse_process(rest)) is not None:
                processes.append(p)
        else:
            files.take(line)
    if "absent" in words:
        return HostReading(absent=True, now=_clock(words.get("now")))
    damaged: list[str] = []
    supervisor, tasks, facts = None, [], {}
    progress: dict[str, tuple[dict[str, Any], ...]] = {}
    for path, lines in files.lines.items():
        name = path.rsplit("/", 1)[-1]
        try:
            if path.startswith("state/") and name.endswith(".facts"):
                facts = _object(_json(lines[0])) if lines else {}
            elif path.startswith("state/") and lines:
                decoded = decode_state_line(_json(lines[0]))
                if isinstance(decoded, SupervisorStateFile):
                    supervisor = decoded
                else:
                    tasks.append(decoded)
            elif path.startswith("events/"):
                progress[name.removesuffix(".jsonl")] = tuple(_lines(lines))
        except (ValueError, StateFileError):  # json's errors are ValueErrors
            damaged.append(path)
    alive = True if "alive" in words else (False if "dead" in words and supervisor is not None else None)
    return HostReading(now=_clock(words.get("now")), supervisor=supervisor, supervisor_alive=alive,
                       tasks=tuple(tasks), facts=facts, progress=progress,
                       processes=None if "alive" in words else tuple(processes), damaged=tuple(damaged))


def _object(raw: object) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise StateFileError(f"a {type(raw).__name__}, not an object")
    return raw


def _lines(lines: list[str]) -> list[dict[str, Any]]:
    """The lines that are JSON objects (a line being written may be cut: it is left out)."""
    out = []
    for line in lines:
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            out.append(data)
    return out


def _clock(text: str | None) -> float | None:
    """`date +%s.%N`; a `date` without %N prints it as is: the whole seconds are still good."""
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        head = text.split(".", 1)[0]
        return float(head) if head.isdigit() else None
