"""The one list of the ways tfcluster reaches a host: every other module takes its names from here.

A host is reached by `transport` (hosts.toml says "ssh" or "local"; a node of a Slurm job is "slurm",
which only the plan writes), and an SSH host by the client its `[ssh] client` names: "paramiko" (the
default, a Python SSH client in this process) or "openssh" (the system's `ssh`, with shared
connections). `transport_kind` folds the two into the key orchestrator.transport.factory builds by.
"""

from __future__ import annotations

from typing import Literal, get_args

HostTransport = Literal["ssh", "local"]  # what a [[hosts]] entry may say
Transport = Literal[HostTransport, "slurm"]  # what a plan's host may say ("slurm": transport/srun.py)
SSHClient = Literal["paramiko", "openssh"]
TRANSPORTS: tuple[str, ...] = get_args(Transport)
SSH_CLIENTS: tuple[str, ...] = get_args(SSHClient)
DEFAULT_SSH_CLIENT: SSHClient = "paramiko"
# Every key of the transport registry: a host's transport, with "ssh" spelled as its client's name.
TRANSPORT_KINDS: tuple[str, ...] = (*(t for t in TRANSPORTS if t != "ssh"), *SSH_CLIENTS)


def transport_kind(transport: str, client: str | None) -> str:
    """The registry key for a host: "local", "slurm", or the SSH client's name."""
    return (client or DEFAULT_SSH_CLIENT) if transport == "ssh" else transport
