"""Pick and build the Transport for a host, from one registry keyed by orchestrator.config.kinds:
"local" (`LocalTransport`), "slurm" (`SrunTransport`: a node of a running Slurm job, its steps run here
or on the job's login host), and one key per SSH client: "paramiko" (`SSHTransport`, with the host's
effective settings: hosts.toml > ssh config > defaults, see orchestrator.config.ssh_config) and
"openssh" (`OpenSSHTransport`: the system's `ssh`, which reads the ssh config itself). Each builder
imports its client only when used: a command that reaches no SSH host never imports Paramiko.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.config.kinds import TRANSPORT_KINDS, transport_kind
from orchestrator.config.schema import SSHOptions
from orchestrator.config.ssh_config import resolve_ssh
from orchestrator.plan.model import HostPlan
from orchestrator.transport.base import Transport
from orchestrator.transport.local import LocalTransport

Opener = Callable[[HostPlan], Transport]  # how every command gets a (not yet connected) transport
# An SSH client's builder: (name for errors, address, hosts.toml's [ssh] keys, login_shell) -> transport.
SSHBuilder = Callable[[str, str, SSHOptions, bool], Transport]


def _paramiko(name: str, address: str, ssh: SSHOptions, login_shell: bool) -> Transport:
    from orchestrator.transport.ssh import SSHTransport

    return SSHTransport(name, resolve_ssh(address, ssh), login_shell=login_shell)


def _openssh(name: str, address: str, ssh: SSHOptions, login_shell: bool) -> Transport:
    from orchestrator.transport.openssh import OpenSSHTransport

    return OpenSSHTransport(name, address, ssh, login_shell=login_shell)


SSH_CLIENT_BUILDERS: dict[str, SSHBuilder] = {"paramiko": _paramiko, "openssh": _openssh}


def _local(host: HostPlan) -> Transport:
    return LocalTransport(host.name, login_shell=host.login_shell)


def _slurm(host: HostPlan) -> Transport:
    from orchestrator.transport.srun import SrunTransport

    return SrunTransport(host.name, host.address, host.job_id,
                         slurm_shell(host.name, host.via, host.ssh, host.login_shell))


def _ssh_host(client: str) -> Callable[[HostPlan], Transport]:
    def build(host: HostPlan) -> Transport:
        return SSH_CLIENT_BUILDERS[client](host.name, host.address, host.ssh, host.login_shell)

    return build


# The registry: every kind of orchestrator.config.kinds.TRANSPORT_KINDS, and nothing else.
BUILDERS: dict[str, Opener] = {"local": _local, "slurm": _slurm,
                               **{client: _ssh_host(client) for client in SSH_CLIENT_BUILDERS}}
assert set(BUILDERS) == set(TRANSPORT_KINDS), "orchestrator.config.kinds and the registry disagree"


def transport_for(host: HostPlan) -> Transport:
    """A (not yet connected) transport for one host of a plan. SSH connects on first use."""
    return BUILDERS[transport_kind(host.transport, host.ssh.client)](host)


def slurm_shell(name: str, via: str, ssh: SSHOptions, login_shell: bool = False) -> Transport:
    """Where Slurm's client commands run for a job: this machine, or its login host over [ssh] with its
    client (errors name `name`)."""
    if not via:
        return LocalTransport(name)
    return SSH_CLIENT_BUILDERS[transport_kind("ssh", ssh.client)](name, via, ssh, login_shell)
