"""How many times a transport tries to connect to a host, and the error that tells its callers not to try
again (no Paramiko here: callers of every transport import it).

A dead host must cost every command a bounded wait: the host's connect timeout, plus ONE more try where
another try can help (a timeout: a dropped packet, a machine slow to answer; a connection closed before
sshd's banner: sshd's MaxStartups drops connections at random under load). A refusal will not change
by trying again (nothing listens, or the host resets the connection: a firewall, tcp wrappers, not
sshd), nor will an authentication or host-key failure: those are final at once. The transport makes
that one retry itself and then raises `ConnectFailed`; the callers' own retry loops (run.remote.with_retry,
results.pull) are for a connection lost while a command ran, and pass a ConnectFailed through as it is.
"""

from __future__ import annotations

from orchestrator.errors import HostError

CONNECT_ATTEMPTS = 2
RETRY_PAUSE_S = 0.2  # before the second try: long enough for a MaxStartups drop to pass, short beside a timeout


class ConnectFailed(HostError):
    """Connecting to the host failed, after the tries worth making: a caller does not try again."""


def worth_another_try(exc: HostError) -> bool:
    """Whether a failed connect may succeed if made again at once (see the module docstring)."""
    return exc.reason in ("timeout", "unreachable", "lost")
