"""Can a port be bound on this host? The one port test of the start's prepare phase (training/launcher.py:
refuse a start whose ports are taken, or pick free ones) and of `tfcluster check` (training/probes/host_probe.py).

Both of those run as the source of `python -c` on a host where nothing is installed, so this module is
not imported there: the orchestrator inlines its source in place of their `from .port_probe import`
line (orchestrator/run/inline_source.py). Hence: standard library only, Python 3.6+, no `__future__`
import, type comments.

How the test binds: a TF task's gRPC server listens on every interface (`*:port`), so its port is tried on
0.0.0.0 (and `::`); a supervisor's control port is tried on the address it listens on. SO_REUSEADDR is
set, as gRPC and the supervisor set it: a listener (another run's server) is a conflict, a connection of
a run that just ended, still in TIME_WAIT on that port, is not (without it, a port would look taken for a
minute after every run).
"""

import errno
import socket
from typing import Any  # noqa: F401 - named in type comments

EVERY_INTERFACE = ""
MAX_PORT = 65535


def _bind_error(family, address, port):
    # type: (int, str, int) -> OSError | None
    try:
        s = socket.socket(family, socket.SOCK_STREAM)
    except OSError:
        return None  # no such protocol here (IPv6 off): nothing can conflict on it
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family != socket.AF_INET:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.bind((address, port))
    except OSError as e:
        return e
    finally:
        s.close()
    return None


def port_problem(port, address=EVERY_INTERFACE):
    # type: (int, str) -> str | None
    """None when `port` can be bound (on every interface, or on `address`); else why not. For one address,
    only "in use" counts: an address that is not this host's (EADDRNOTAVAIL) says nothing about the port."""
    if address != EVERY_INTERFACE:
        e = _bind_error(socket.AF_INET6 if ":" in address else socket.AF_INET, address, port)
        if e is not None and e.errno == errno.EADDRINUSE:
            return "%s:%d: %s" % (address, port, e.strerror)
        return None
    e = _bind_error(socket.AF_INET, "0.0.0.0", port)
    if e is not None:
        return "0.0.0.0:%d: %s" % (port, e.strerror)
    e = _bind_error(getattr(socket, "AF_INET6", -1), "::", port)
    if e is not None and e.errno == errno.EADDRINUSE:
        return ":::%d: %s" % (port, e.strerror)
    return None


def taken_ports(wanted):
    # type: (list[list[Any]]) -> list[list[Any]]
    """`wanted`: [[label, address or "", port], ...] -> the taken ones, [[label, port, why], ...]."""
    taken = []
    for label, address, port in wanted:
        why = port_problem(int(port), str(address))
        if why is not None:
            taken.append([label, port, why])
    return taken


def free_ports(start, count):
    # type: (int, int) -> list[int]
    """The first `count` ports from `start` up that are free on every interface (fewer near 65535)."""
    found = []  # type: list[int]
    port = max(1024, start)
    while len(found) < count and port <= MAX_PORT:
        if port_problem(port) is None:
            found.append(port)
        port += 1
    return found
