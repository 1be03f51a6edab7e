"""Free local TCP ports: a block of consecutive ports for a cluster's tasks (TF ports are base_port + i),
or one port free on several loopback addresses at once.

A port found free here is bound later by another process (a TF server, an sshd), so two programs looking
at the same time could pick the same one. `TFCLUSTER_PORT_RANGE=LOW-HIGH` confines both choices to a range
of this process's own: programs given disjoint ranges never collide (the test suite gives each of its
parallel workers one, tests/conftest.py)."""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Iterable

EVERY_INTERFACE = ("0.0.0.0",)
RANGE_ENV = "TFCLUSTER_PORT_RANGE"


def port_range() -> tuple[int, int] | None:
    """(low, high) from TFCLUSTER_PORT_RANGE, or None."""
    low, _, high = os.environ.get(RANGE_ENV, "").partition("-")
    return (int(low), int(high)) if low.isdigit() and high.isdigit() and int(low) < int(high) else None


def port_free(port: int, addresses: Iterable[str] = EVERY_INTERFACE) -> bool:
    """True when `port` can be bound now on every one of `addresses` (no SO_REUSEADDR: anything bound,
    listening or not, counts as taken)."""
    for address in addresses:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((address, port))
            except OSError:
                return False
    return True


def ephemeral_low(default: int = 32768) -> int:
    """The first port of the kernel's ephemeral range: any outgoing connection may hold one of those for a
    while, so a server port planned there can be found taken by chance."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return default


def free_port_block(n: int, low: int | None = None, high: int | None = None) -> int:
    """First port of n consecutive ports that are free now in [low, high), by default in TFCLUSTER_PORT_RANGE
    or from 20000 to below the ephemeral range (see ephemeral_low). Random start so parallel runs rarely
    collide."""
    confined = port_range()
    if low is None and high is None and confined is not None:
        low, high = confined
    low = 20000 if low is None else low
    if high is None:
        high = max(low + 4 * n + 1000, min(60000, ephemeral_low()))
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(low, high - n)
        if all(port_free(base + i) for i in range(n)):
            return base
    raise RuntimeError(f"no block of {n} free ports found")


def free_port_on(addresses: Iterable[str]) -> int:
    """One port, picked by the kernel from its ephemeral range (or at random in TFCLUSTER_PORT_RANGE), that
    is free on 0.0.0.0 and on every one of `addresses` (so one server per loopback address can share it)."""
    wanted = ("0.0.0.0", *addresses)
    confined = port_range()
    if confined is not None:
        rng = random.Random()
        for _ in range(200):
            port = rng.randrange(*confined)
            if port_free(port, wanted):
                return port
        raise RuntimeError(f"no port of {RANGE_ENV}={confined[0]}-{confined[1]} free on all of {', '.join(wanted)}")
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port_free(port, wanted):
            return port
    raise RuntimeError(f"no port free on all of {', '.join(wanted)}")
