"""Is a task's port free on this host? Checked before each start: a port another program (another run)
holds would make the task's TF server fail to bind, or its peers reach that other program."""

from __future__ import annotations

import socket
import time

SETTLE_S = 2.0  # a restarted task's previous process may take this long to release its port


def _bindable(port: int) -> bool:
    """Bindable on every interface, as TensorFlow binds it (SO_REUSEADDR: TIME_WAIT is no conflict)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def port_taken(port: int, settle: float = SETTLE_S) -> bool:
    """True when `port` stays taken for `settle` seconds."""
    deadline = time.monotonic() + settle
    while not _bindable(port):
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.1)
    return False
