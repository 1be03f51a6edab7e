"""Transports of either SSH client for tests over testkit's sshd machines, built through the product's
registry (orchestrator.transport.factory.SSH_CLIENT_BUILDERS), and a private, short directory for the
OpenSSH client's shared connections (`openssh_control_dir`), whose masters are closed at the end."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from orchestrator.config.schema import SSHOptions
from orchestrator.transport.base import Transport
from orchestrator.transport.factory import SSH_CLIENT_BUILDERS
from orchestrator.transport.openssh_args import CONTROL_DIR_ENV
from testkit.ssh_masters import close_ssh_masters
from testkit.sshd import Machines

CLIENTS = ("paramiko", "openssh")


def ssh_options(m: Machines, **extra: object) -> SSHOptions:
    """What testkit's hosts.toml says for these machines (never the developer's ~/.ssh), plus `extra`."""
    base: dict[str, object] = {
        "user": m.user, "port": m.port, "identity_file": m.identity_file, "known_hosts": m.known_hosts,
        "config_file": "none", "use_agent": False, "connect_timeout": 5.0,
    }
    base.update(extra)
    return SSHOptions.model_validate(base)


def client_transport(client: str, m: Machines, i: int = 0, *, address: str | None = None,
                     **extra: object) -> Transport:
    """Machine i (or `address`) as host `m<i>`, reached by `client`."""
    return SSH_CLIENT_BUILDERS[client](f"m{i}", address or m.addresses[i], ssh_options(m, **extra), False)


@contextmanager
def openssh_control_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh control directory (short: it holds Unix sockets) for this test and the CLIs it starts."""
    directory = tempfile.mkdtemp(prefix="tfc-", dir="/tmp")
    monkeypatch.setenv(CONTROL_DIR_ENV, directory)
    try:
        yield directory
    finally:
        close_ssh_masters(directory)
        shutil.rmtree(directory, ignore_errors=True)
