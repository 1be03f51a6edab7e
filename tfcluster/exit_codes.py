"""What tfcluster's exit code tells a script (the README's "Exit codes" table says the same):

0  everything asked for holds (the run started / is running or finished / every host is ready); a
   stalled task (alive, not stepping: SIGSTOPped, waiting) is alive: 0, and `dash --once --json` names it
1  a task or the run failed, a host is not ready, or a stop left something running
2  bad input: hosts.toml, a command-line option, an unknown run, or a port of the plan in use on a host
   at `start` (one line on stderr; nothing was started)
3  a host could not be reached, or a task was lost (its supervisor and its processes are gone):
   the truth about the run cannot be told there
130 interrupted (Ctrl-C, SIGTERM, SIGHUP)

`start` and `stop` say 3 only when every host that failed could not be reached; a host that was reached and
failed (a task, a step there, something left running) makes it 1, since that failure is known.
"""

from __future__ import annotations

from collections.abc import Iterable

OK = 0
FAILED = 1
USAGE = 2
UNREACHABLE = 3
INTERRUPTED = 130
# HostError reasons (orchestrator/errors.py) that mean the host was not reached, or its connection broke
CONNECT_REASONS = ("refused", "timeout", "unreachable", "lost")


def for_run(run_state: str, task_states: Iterable[str]) -> int:
    """The exit code of `status` and `dash --once`: from the run's state and its tasks' (the reducer's)."""
    if run_state == "failed":
        return FAILED
    if any(s in ("unreachable", "lost") for s in task_states):
        return UNREACHABLE
    return OK


def for_hosts(failures: Iterable[str | None]) -> int:
    """The exit code of `start` and `stop` from each failed host's reason (None: it was reached, and what
    was asked does not hold there): 1 when any host failed for a reason of its own, else 3 when any could
    not be reached, else 0."""
    reasons = list(failures)
    if any(r not in CONNECT_REASONS for r in reasons):
        return FAILED
    return UNREACHABLE if reasons else OK
