"""Pick and build the Transport for a host: `LocalTransport` for `transport = "local"`, else SSH with
the host's effective settings (hosts.toml > ssh config > defaults, see orchestrator.config.ssh_config)."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.config.ssh_config import resolve_ssh
from orchestrator.plan.model import HostPlan
from orchestrator.transport.base import Transport
from orchestrator.transport.local import LocalTransport

Opener = Callable[[HostPlan], Transport]  # how every command gets a (not yet connected) transport


def transport_for(host: HostPlan) -> Transport:
    """A (not yet connected) transport for one host of a plan. SSH connects on first use."""
    if host.transport == "local":
        return LocalTransport(host.name, login_shell=host.login_shell)
    from orchestrator.transport.ssh import SSHTransport  # Paramiko: only for SSH hosts

    return SSHTransport(host.name, resolve_ssh(host.address, host.ssh), login_shell=host.login_shell)
