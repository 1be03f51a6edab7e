"""The one place the system `ssh`'s failures become the project's `HostError(host, reason, detail)`.

ssh says what went wrong only in words, on stderr, and exits 255. The reasons are the Paramiko path's
(orchestrator.transport.ssh_faults): refused, timeout, unreachable, auth-failed, hostkey-unknown,
hostkey-changed, lost; the detail is ssh's own message (its last lines), so the user reads what
`ssh` would have told them. A failure before the command started is a connect failure
(ConnectFailed: not tried again by callers, see connect_policy); one after it started is "lost".
"""

from __future__ import annotations

import re

from orchestrator.errors import HostError, Reason

SSH_FAILED = 255  # ssh's own exit status when it fails (a remote command may exit 255 too: see below)
DETAIL_CHARS = 300

# First match wins: the host-key and authentication messages before the network ones (a changed host key
# is reported with lines that mention the connection too).
_PATTERNS: tuple[tuple[Reason, re.Pattern[str]], ...] = (
    ("hostkey-changed", re.compile(r"REMOTE HOST IDENTIFICATION HAS CHANGED|host key for .* has changed", re.I)),
    ("hostkey-unknown", re.compile(r"No \S+ host key is known|Host key verification failed", re.I)),
    ("auth-failed", re.compile(r"Permission denied|Too many authentication failures|no more authentication", re.I)),
    ("refused", re.compile(r"Connection refused|Connection reset by", re.I)),
    ("timeout", re.compile(r"timed out", re.I)),
    ("unreachable", re.compile(r"Could not resolve hostname|Name or service not known|No route to host|"
                               r"Network is unreachable|kex_exchange_identification|Connection closed by", re.I)),
)
# After the command started: the connection (or the shared master) went away under it.
_LOST = re.compile(r"closed by remote host|Broken pipe|mux_client|Control master terminated|client_loop|"
                   r"Connection to .* closed|Connection reset|Timeout, server .* not responding", re.IGNORECASE)
_NOISE = re.compile(r"^(Warning: Permanently added|Pseudo-terminal will not be allocated)", re.IGNORECASE)


def ssh_detail(stderr: str) -> str:
    """ssh's message: its meaningful stderr lines, the last DETAIL_CHARS characters of them."""
    lines = [line.strip() for line in stderr.replace("\r", "").splitlines()]
    kept = [line for line in lines if line and not _NOISE.match(line) and not set(line) <= {"@"}]
    return " / ".join(kept)[-DETAIL_CHARS:] or "ssh failed without a message"


def connect_reason(stderr: str) -> Reason:
    """Why ssh could not open the connection (before any command ran)."""
    for reason, pattern in _PATTERNS:
        if pattern.search(stderr):
            return reason
    return "unreachable"


def connect_error(host: str, where: str, stderr: str, hint: str = "") -> HostError:
    """ssh exited 255 before the command started: the connection (or login) failed."""
    return HostError(host, connect_reason(stderr), f"{where}: {ssh_detail(stderr)}{hint}")


def lost_connection(stderr: str) -> bool:
    """Whether a command's ssh ended because the connection broke (not because the command exited 255)."""
    return bool(_LOST.search(stderr))


def lost_error(host: str, stderr: str, what: str) -> HostError:
    return HostError(host, "lost", f"connection lost {what}: {ssh_detail(stderr)}")
