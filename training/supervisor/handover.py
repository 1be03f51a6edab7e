"""The hand-over of a Slurm run: each node's supervisor runs as a task of ONE job step that the job's batch
script starts (so Slurm accounts for every process and ends them with the job), not as a process the
start command forks. Both sides meet through two FIFOs in the node's run dir, `handover.in` and
`handover.out`, made by whichever side comes first (a FIFO holds no bytes at rest; the step's side removes
them once they have met).

- `hand_over` (in the start command, exec'd by the launcher at `go`, as `--detach` is on an SSH host): on
  the batch node it first writes `go` in its run dir, which the batch script waits for before it starts
  the supervisors' step. Then it writes the forwarded variables (`[training] forward_env`: names from
  the launcher, values from its environment) into `handover.in`, reads `PID <pid>` from `handover.out`
  and relays every state the supervisor pushes there, as detach.py relays its forked supervisor's.
- `serve_step` (the step's task on each node, `--step`): takes the supervisor lock, reads the variables
  into its own environment (its tasks inherit them; no file holds them), says its pid, and supervises
  in the foreground with `handover.out` as its ready pipe. A supervisor ended by SIGTERM (`stop`, or
  Slurm ending the job) exits STOPPED_EXIT, which tells the batch script to keep the allocation for a
  while: `stop` verifies that nothing is left on any node, then cancels the job itself.

Linux FIFO semantics: a reader opened with O_NONBLOCK sees nothing until a writer comes; a writer opened
with O_NONBLOCK fails with ENXIO while there is no reader, so neither side ever blocks past its deadline.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import time

from ..run.layout import RunLayout
from .core import Supervisor
from .detach import redirect_stdio, relay_and_report, report_existing, supervisor_lock
from .files import read_json

FIFO_IN, FIFO_OUT = "handover.in", "handover.out"  # in the host's run dir
GO_FILE = "go"  # in the batch node's run dir: the batch script starts the supervisors' step once it exists
STOPPED_EXIT = 75  # the step's exit when its supervisor was stopped (the batch script waits for scancel)
STEP_WAIT_S = 120.0  # how long a step's supervisor waits for its node's start command


def hand_over(run_dir: str, host: str, *, go: bool, forwarded: list[str], timeout: float) -> int:
    """The start command's side (`--hand-over`): the launcher's exit code, 0 when the step's supervisor
    came and took over. A retried launch finds that supervisor already running and reports it."""
    layout = RunLayout(run_dir)
    if read_json(layout.supervisor_state_file(host)) is not None:
        return report_existing(layout, host, timeout)
    pid, states = _meet(layout, go=go, forwarded=forwarded, deadline=time.monotonic() + timeout)
    return relay_and_report(layout, pid, states, timeout)


def _meet(layout: RunLayout, *, go: bool, forwarded: list[str], deadline: float) -> tuple[int | None, int]:
    """The supervisor's pid (None when none came by `deadline`) and the FIFO its states come through."""
    _make_fifos(layout)
    states = os.open(os.path.join(layout.root, FIFO_OUT), os.O_RDONLY | os.O_NONBLOCK)
    if go:
        os.close(os.open(os.path.join(layout.root, GO_FILE), os.O_WRONLY | os.O_CREAT, 0o600))
    env = {name: os.environ[name] for name in forwarded if name in os.environ}
    to_step = _open_writer(os.path.join(layout.root, FIFO_IN), deadline)
    if to_step is None:
        return None, states
    os.write(to_step, (json.dumps({"env": env}) + "\n").encode())
    os.close(to_step)
    line = _read_line(states, deadline)
    pid = line[len("PID "):] if line.startswith("PID ") else ""
    return (int(pid) if pid.isdigit() else None), states


def _make_fifos(layout: RunLayout) -> None:
    for name in (FIFO_IN, FIFO_OUT):
        with contextlib.suppress(FileExistsError):
            os.mkfifo(os.path.join(layout.root, name), 0o600)


def _open_writer(path: str, deadline: float) -> int | None:
    while True:
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO or time.monotonic() > deadline:
                return None
        time.sleep(0.02)


def _read_line(fd: int, deadline: float) -> str:
    """One line from a FIFO, byte by byte (what follows it stays in the FIFO for the relay)."""
    got = b""
    while not got.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        byte = os.read(fd, 1)
        if not byte:
            break
        got += byte
    return got.decode("utf-8", "replace").strip()


def serve_step(run_dir: str, host: str, wait: float = STEP_WAIT_S) -> int:
    """The step's side: supervise this node's tasks in the foreground (see the module docstring), once the
    start command has come (at most `wait` seconds)."""
    layout = RunLayout(run_dir)
    os.umask(0o077)
    lock = supervisor_lock(layout, host)
    redirect_stdio(os.path.join(layout.logs, f"supervisor-{host}.log"))
    if lock is None:
        print(f"another supervisor of this run holds its lock on {host}", flush=True)
        return 1
    with contextlib.suppress(OSError):  # already a group leader (slurmstepd made it one)
        os.setsid()  # as a forked supervisor: its own session and group, which `stop` may kill whole
    _make_fifos(layout)
    from_start = os.open(os.path.join(layout.root, FIFO_IN), os.O_RDONLY | os.O_NONBLOCK)
    line = _read_line(from_start, time.monotonic() + wait)
    os.close(from_start)
    if not line:
        print(f"no hand-over from `tfcluster start` within {wait:g}s: not starting", flush=True)
        return 1
    os.environ.update({str(k): str(v) for k, v in json.loads(line)["env"].items()})
    try:
        ready: int | None = os.open(os.path.join(layout.root, FIFO_OUT), os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        ready = None  # the start command went away: supervise all the same, nobody to tell
    for name in (FIFO_IN, FIFO_OUT):
        os.unlink(os.path.join(layout.root, name))
    if ready is not None:
        os.write(ready, f"PID {os.getpid()}\n".encode())
    supervisor = Supervisor(run_dir, host, ready_fd=ready)
    code = supervisor.serve()
    return STOPPED_EXIT if supervisor.state == "stopped" else code
