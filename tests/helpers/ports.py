"""Free TCP port blocks for tests that start TensorFlow servers (ports are unique across the cluster)."""

from __future__ import annotations

import random
import socket


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_port_block(n: int, low: int = 20000, high: int = 60000) -> int:
    """First port of n consecutive ports that are free now. Random start so parallel runs rarely collide."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(low, high - n)
        if all(_free(base + i) for i in range(n)):
            return base
    raise RuntimeError(f"no block of {n} free ports found")
