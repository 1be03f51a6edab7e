"""Pick and build the Transport for a host: `LocalTransport` for `transport = "local"`, else SSH with
the host's effective settings (hosts.toml > ssh config > defaults, see `orchestrator.ssh_config`)."""

from __future__ import annotations

from orchestrator.config import Config, HostConfig, explicit_ssh
from orchestrator.local_transport import LocalTransport
from orchestrator.plan import HostPlan
from orchestrator.ssh_config import resolve_ssh
from orchestrator.ssh_transport import SSHTransport
from orchestrator.transport import Transport


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
