"""Pick and build the Transport for a host: `LocalTransport` for `transport = "local"`, else SSH with
the host's effective settings (hosts.toml > ssh config > defaults, see `orchestrator.config.ssh_config`)."""

from __future__ import annotations

from orchestrator.config.schema import Config, HostConfig, explicit_ssh
from orchestrator.config.ssh_config import resolve_ssh
from orchestrator.plan.build import HostPlan
from orchestrator.transport.base import Transport
from orchestrator.transport.local import LocalTransport
from orchestrator.transport.ssh import SSHTransport


def transport_for(host: HostPlan) -> Transport:
    """A (not yet connected) transport for one host of a plan. SSH connects on first use."""
    if host.transport == "local":
        return LocalTransport(host.name)
    return SSHTransport(host.name, resolve_ssh(host.address, host.ssh))


def transport_for_host(config: Config, host: HostConfig) -> Transport:
    """The same, straight from the config (for callers that have no plan)."""
    if host.transport == "local":
        return LocalTransport(host.name)
    return SSHTransport(host.name, resolve_ssh(host.address, explicit_ssh(config, host)))
