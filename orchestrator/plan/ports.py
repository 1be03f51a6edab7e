"""Ports: one per task, then one per host for its supervisor's peer channel, consecutive from
`[cluster] base_port`, unique across the whole cluster.

TensorFlow's gRPC server listens on every interface of its machine (`*:port`, whatever address the
cluster spec names), so ports are unique cluster-wide, not per host: loopback "machines" in tests share
one network stack, and on real machines it keeps `plan` output unambiguous. Pure: nothing is probed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.errors import ConfigError

MAX_PORT = 65535


def allocate_ports(
    counts: Mapping[str, int], job_order: Sequence[str], base_port: int, source: str
) -> dict[tuple[str, int], int]:
    """(job, index) -> port, numbered in `job_order` then index order from `base_port`."""
    total = sum(counts.get(job, 0) for job in job_order)
    last = base_port + total - 1
    if last > MAX_PORT:
        raise ConfigError(
            source, "cluster.base_port",
            f"base_port {base_port} leaves no room for the plan's {total} ports (one per task, one per host's "
            f"supervisor) "
            f"(the last would be {last} > {MAX_PORT}); use base_port <= {MAX_PORT + 1 - total}",
        )
    ports: dict[tuple[str, int], int] = {}
    port = base_port
    for job in job_order:
        for i in range(counts.get(job, 0)):
            ports[(job, i)] = port
            port += 1
    return ports
