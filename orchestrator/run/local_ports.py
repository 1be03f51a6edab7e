"""Free local TCP ports: a block of consecutive ports for a cluster's tasks (TF ports are base_port + i),
or one port free on several loopback addresses at once."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterable

EVERY_INTERFACE = ("0.0.0.0",)


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


def free_port_block(n: int, low: int = 20000, high: int | None = None) -> int:
    """First port of n consecutive ports that are free now, below the ephemeral range (see ephemeral_low).
    Random start so parallel runs rarely collide."""
    if high is None:
        high = max(low + 4 * n + 1000, min(60000, ephemeral_low()))
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(low, high - n)
        if all(port_free(base + i) for i in range(n)):
            return base
    raise RuntimeError(f"no block of {n} free ports found")


def free_port_on(addresses: Iterable[str]) -> int:
    """One port, picked by the kernel from its ephemeral range, that is free on 0.0.0.0 and on every one of
    `addresses` (so one server per loopback address can share it)."""
    wanted = ("0.0.0.0", *addresses)
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port_free(port, wanted):
            return port
    raise RuntimeError(f"no port free on all of {', '.join(wanted)}")
