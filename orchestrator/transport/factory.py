"""Pick and build the Transport for a host: `LocalTransport` for `transport = "local"`, `SrunTransport` for a
node of a running Slurm job (its steps, run here or on the job's login host), else SSH with the host's
effective settings (hosts.toml > ssh config > defaults, see orchestrator.config.ssh_config)."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.config.schema import SSHOptions
from orchestrator.config.ssh_config import resolve_ssh
from orchestrator.plan.model import HostPlan
from orchestrator.transport.base import Transport
from orchestrator.transport.local import LocalTransport

Opener = Callable[[HostPlan], Transport]  # how every command gets a (not yet connected) transport


def transport_for(host: HostPlan) -> Transport:
    """A (not yet connected) transport for one host of a plan. SSH connects on first use."""
    if host.transport == "local":
        return LocalTransport(host.name, login_shell=host.login_shell)
    if host.transport == "slurm":
        from orchestrator.transport.srun import SrunTransport

        return SrunTransport(host.name, host.address, host.job_id, slurm_shell(host.name, host.via, host.ssh,
                                                                               host.login_shell))
    from orchestrator.transport.ssh import SSHTransport  # Paramiko: only for SSH hosts

    return SSHTransport(host.name, resolve_ssh(host.address, host.ssh), login_shell=host.login_shell)


def slurm_shell(name: str, via: str, ssh: SSHOptions, login_shell: bool = False) -> Transport:
    """Where Slurm's client commands run for a job: this machine, or its login host over [ssh] (errors name
    `name`)."""
    if not via:
        return LocalTransport(name)
    from orchestrator.transport.ssh import SSHTransport  # Paramiko: only for a login host

    return SSHTransport(name, resolve_ssh(via, ssh), login_shell=login_shell)
