"""Reading one host's `check` probe as it runs: its lines, the remote clock, and a watchdog.

The command (orchestrator/run/check.py probe_argv) prints the remote clock first, on a line marked
CLOCK_MARKER (a login shell may print lines of its own before it), then what the probe says. The stream
has no timeout of its own: a watchdog closes it after `timeout` seconds. A first import of TensorFlow is
the one step known to take long (tens of seconds cold from a shared file system, several probes at once
on a busy machine): the probe says when it starts one (training/probes/host_probe.py IMPORTING_TF) and
the import gets TF_IMPORT_S more, so a host that is merely importing is not called hung.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.errors import HostError
from orchestrator.transport.base import Transport
from training.probes.host_probe import IMPORTING_TF

CLOCK_MARKER = "tfcluster-clock: "  # the line the remote clock is read from, whatever the shell prints first
DATE_COMMAND = f'echo "{CLOCK_MARKER}$(date +%s.%N 2>/dev/null)"'
TF_IMPORT_S = 120.0  # a first import of TensorFlow; `start` gives its tasks as long by default


@dataclass
class ProbeOutput:
    lines: list[str]  # every line but the clock's and the import's marker
    sent: float  # the local clock when the command was sent
    clock_line_at: float  # the local clock when the remote clock's line arrived (0: none came)
    remote_clock: float  # the remote clock it read (0: `date` could not say)
    stderr_tail: str


def read_probe(host: str, transport: Transport, argv: list[str], *, timeout: float,
               clock: Callable[[], float], tf_import_s: float = TF_IMPORT_S) -> ProbeOutput:
    """Run the probe command and read it to its end; HostError "timeout" when the watchdog ended it."""
    sent = clock()
    stream = transport.stream(argv)
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        stream.close()

    def arm(seconds: float) -> threading.Timer:
        timer = threading.Timer(seconds, kill)
        timer.daemon = True
        timer.start()
        return timer

    watchdog, importing = arm(timeout), False
    out = ProbeOutput([], sent, 0.0, 0.0, "")
    try:
        for line in stream.lines():
            if line.startswith(CLOCK_MARKER) and not out.clock_line_at:
                out.clock_line_at, out.remote_clock = clock(), _remote_clock(line)
            elif line == IMPORTING_TF and not importing:
                watchdog.cancel()
                watchdog, importing = arm(timeout + tf_import_s), True
            else:
                out.lines.append(line)
    finally:
        watchdog.cancel()
        stream.close()
    if timed_out.is_set():
        given = f" ({tf_import_s:g}s more for TensorFlow's import)" if importing else ""
        raise HostError(host, "timeout", f"probe did not finish within {timeout:g}s{given}")
    out.stderr_tail = getattr(stream, "stderr_tail", "") or ""
    return out


def _remote_clock(line: str) -> float:
    """The seconds on a CLOCK_MARKER line; 0 when `date` could not say (no %N: "1700000000.N")."""
    try:
        return float(line[len(CLOCK_MARKER):])
    except ValueError:
        return 0.0
