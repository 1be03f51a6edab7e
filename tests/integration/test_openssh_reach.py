"""Hosts only `ssh` itself can reach, over real sshd: one defined by an alias in an `Include`d file of the
ssh config, and one whose login needs a user certificate (sshd with TrustedUserCAKeys, the certificate
named by `CertificateFile`). Both work with client = "openssh"; with "paramiko" each fails in one line
that names the ssh config line Paramiko does not read and suggests client = "openssh". And a key with a
passphrase typed once at `check`'s terminal, then reused by every later command through the shared
connections."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orchestrator.errors import HostError
from orchestrator.transport.base import Transport
from testkit.sshd import Machines
from tests.helpers.ssh_clients import client_transport, openssh_control_dir
from tests.helpers.terminal import Terminal
from tests.integration.lifecycle_helpers import REPO, cli, cli_env

pytestmark = pytest.mark.integration

HINT = 'client = "openssh"'


@pytest.fixture(autouse=True)
def control_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with openssh_control_dir(monkeypatch) as directory:
        yield directory


def connect(transport: Transport) -> None:
    opened = getattr(transport, "connect", None)
    assert opened is not None, type(transport)
    opened()


def test_a_host_known_only_by_an_alias_in_an_included_file(machines: Machines, tmp_path: Path) -> None:
    included = tmp_path / "config.d"
    included.mkdir()
    (included / "cluster.conf").write_text(
        f"Host tfc-included-alias\n  HostName {machines.addresses[1]}\n  Port {machines.port}\n")
    config = tmp_path / "ssh_config"
    config.write_text(f"Include {included}/*\n")
    # no port in hosts.toml: it comes from the included file too
    opts = {"config_file": str(config), "port": None}
    over_ssh = client_transport("openssh", machines, 1, address="tfc-included-alias", **opts)
    result = over_ssh.run(["/bin/sh", "-c", "echo $SSH_CONNECTION"], check=True)
    assert result.stdout.split()[2:4] == [machines.addresses[1], str(machines.port)]

    with pytest.raises(HostError) as info:
        connect(client_transport("paramiko", machines, 1, address="tfc-included-alias", **opts))
    line = str(info.value)
    assert "\n" not in line and info.value.host == "m1"
    assert "Include" in line and HINT in line, line


@pytest.fixture
def ca_machines(sshd_machines: Callable[..., Machines]) -> Iterator[Machines]:
    m = sshd_machines(1, user_ca=True)
    yield m
    m.close()


def test_a_login_that_needs_a_user_certificate(ca_machines: Machines, tmp_path: Path) -> None:
    m = ca_machines
    key = tmp_path / "certified"  # a key no authorized_keys lists: only its certificate lets it in
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, capture_output=True)
    cert = tmp_path / "certified.signed.pub"  # not `<key>-cert.pub`: only CertificateFile points at it
    m.sign_user_key(f"{key}.pub").rename(cert)
    config = tmp_path / "ssh_config"
    config.write_text(f"Host {m.addresses[0]}\n  IdentityFile {key}\n  CertificateFile {cert}\n"
                      "  IdentitiesOnly yes\n")
    opts = {"config_file": str(config), "identity_file": None}

    over_ssh = client_transport("openssh", m, address=m.addresses[0], **opts)
    assert over_ssh.run(["echo", "certified"], check=True).stdout == "certified\n"
    assert "certificate" in m.log_file(0).read_text().lower()  # sshd accepted it as a certificate

    with pytest.raises(HostError) as info:
        connect(client_transport("paramiko", m, address=m.addresses[0], **opts))
    line = str(info.value)
    assert info.value.reason == "auth-failed" and "\n" not in line
    assert "CertificateFile" in line and HINT in line, line


# Make the pty the command's controlling terminal (Terminal starts it in a session of its own), as a login
# shell's terminal is: ssh reads a passphrase from /dev/tty only.
ON_ITS_TERMINAL = ("import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
                   "os.execv(sys.executable, [sys.executable, '-m', 'tfcluster', *sys.argv[1:]])")


def test_check_at_a_terminal_asks_once_per_host_and_later_commands_reuse_the_connection(
        machines: Machines, tmp_path: Path, state_dir: Path, control_dir: str) -> None:
    """A key with a passphrase (no agent): `check` at a terminal opens each host's shared connection, asking
    for the passphrase once per host; a command after it (no terminal, BatchMode) asks nothing."""
    key = tmp_path / "locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "typed-once", "-f", str(key)], check=True,
                   capture_output=True)
    with open(machines.root / "authorized_keys", "a") as keys:
        keys.write(Path(f"{key}.pub").read_text())
    (tmp_path / "prog.py").write_text("print('hi')\n")
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", identity_file=str(key),
                                training={"command": "{python} prog.py", "sync": ["prog.py"]},
                                host_extra={i: {"ssh": {"client": "openssh"}} for i in range(3)})
    argv = [sys.executable, "-c", ON_ITS_TERMINAL, "check", str(hosts)]
    with Terminal(argv, cli_env(state_dir), REPO, columns=200) as term:
        for n in range(1, 4):
            term.wait_until_shown(lambda text, n=n: text.count("Enter passphrase for key") == n, 60,
                                  f"passphrase prompt {n}")
            term.write(b"typed-once\n")
        term.wait_until_shown(lambda text: text.count("opened a shared ssh connection") == 3, 60, "3 connections")
        assert term.wait_exit(60) == 0, term.text()[-3000:]
    again = cli(state_dir, "check", str(hosts), "--json")  # no terminal: BatchMode, through the connections
    assert again.returncode == 0, again.stdout + again.stderr
    with pytest.raises(HostError) as info:  # Paramiko cannot ask: it fails in one line
        connect(client_transport("paramiko", machines, identity_file=str(key)))
    assert info.value.reason == "auth-failed" and str(key) in str(info.value)
