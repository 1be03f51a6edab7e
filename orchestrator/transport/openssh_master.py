"""Shared connections of the system `ssh` (ControlMaster): open one per host, find it alive, close it.

A master is started on its own, never as a side effect of a command: `ssh -N -f` with ControlMaster=auto
and ControlPersist, its stdin and stdout /dev/null and its stderr an unnamed file. A master born from a
command (ControlMaster=auto on the command itself) keeps that command's pipes open after the command
ends, so whoever waits for the command's end waits for the master's (the known OpenSSH pitfall). Every
command then runs with ControlMaster=no: through the master when it is alive, over its own connection
when it is not, never becoming a master.

`ssh -O check` tells a live master from a missing or stale socket; a stale one (its master died with
its host) is unlinked by the master's start (ssh does that with ControlMaster=auto). `ssh -O exit`
closes a master at once, `ssh -O stop` once the commands running through it have ended. `interactive`:
the master may ask for a password or second factor on the terminal (no BatchMode); the commands after
it reuse it without asking.
"""

from __future__ import annotations

import subprocess
import tempfile

from orchestrator.errors import HostError
from orchestrator.transport.openssh_args import Destination, control_dir
from orchestrator.transport.openssh_faults import connect_error

CHECK_TIMEOUT_S = 10.0


def master_alive(dest: Destination) -> bool:
    """Whether a master for this destination answers on its socket."""
    return _control(dest, "check")


def open_master(host: str, dest: Destination, *, interactive: bool = False) -> None:
    """Start the shared connection (after authentication ssh goes to the background and this returns);
    a failure is a HostError naming the reason, with ssh's message."""
    argv = dest.argv("-N", "-f", control_dir=control_dir(), batch=not interactive, master="auto")
    limit = dest.connect_timeout * 3 + 5  # ssh's connection attempts, then authentication
    # Its stderr is an unnamed file, not a pipe: the master keeps it after its foreground part exits.
    with tempfile.TemporaryFile() as err:
        try:
            done = subprocess.run(argv, stdin=None if interactive else subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=err, check=False,
                                  timeout=None if interactive else limit)
        except subprocess.TimeoutExpired as exc:
            raise HostError(host, "timeout", f"{dest.address}: ssh did not connect within "
                            f"{limit:g}s") from exc
        except OSError as exc:
            raise HostError(host, "unreachable", f"cannot run ssh: {exc.strerror or exc}") from exc
        if done.returncode != 0:
            err.seek(0)
            raise connect_error(host, dest.address, err.read().decode("utf-8", "replace"))


def close_master(dest: Destination, *, end_sessions: bool = True) -> bool:
    """Close this destination's master; whether one was running. `end_sessions`: at once, ending the commands
    still running through it (`ssh -O exit`); else it takes no new command and exits once those end
    (`ssh -O stop`: another tfcluster command's stream through it, a `dash` of another run, goes on)."""
    return _control(dest, "exit" if end_sessions else "stop")


def _control(dest: Destination, operation: str) -> bool:
    """`ssh -O <operation>` to this destination's master; whether it answered yes (no master: False)."""
    if dest.persist_s <= 0:
        return False
    argv = dest.argv("-O", operation, control_dir=control_dir(), master="no")
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=CHECK_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
