"""SSHTransport against real sshd machines: quoting, stdin, timeouts, file copies, streams, ProxyJump, faults."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.config.ssh_config import resolve_ssh
from orchestrator.errors import HostError
from orchestrator.transport.ssh import SSHTransport
from testkit.sshd import Machines
from tests.helpers.procs import read_pid, wait_gone
from tests.helpers.quoting import ECHO_ARGV, NASTY
from tests.helpers.ssh_clients import ssh_options
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def ssh(machines: Machines) -> Iterator[SSHTransport]:
    transport = SSHTransport("m0", resolve_ssh(machines.addresses[0], ssh_options(machines)))
    yield transport
    transport.close()


def test_values_reach_the_remote_verbatim(ssh: SSHTransport) -> None:
    result = ssh.run([*ECHO_ARGV, *NASTY], env={"IGNORED": "a b"})
    assert result.ok, result.stderr
    assert json.loads(result.stdout) == NASTY
    assert result.stderr == ""  # the pid marker line is stripped


def test_stdin_exit_code_env_and_cwd_with_tilde(ssh: SSHTransport, machines: Machines) -> None:
    result = ssh.run(["/bin/sh", "-c", 'cat; printf "%s|" "$X" "$PWD"; echo bad >&2; exit 4'],
                     stdin=b"from stdin\n", env={"X": "it's $x"}, cwd="~")
    assert result.exit_code == 4
    assert result.stdout.startswith("from stdin\nit's $x|/")
    assert result.stderr == "bad\n"


def test_timeout_kills_the_remote_command(ssh: SSHTransport, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    started = time.monotonic()
    with pytest.raises(HostError) as info:
        # a background child of the command: killing only the shell would leave it running
        ssh.run(["/bin/sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], timeout=1.0)
    assert info.value.reason == "timeout" and info.value.host == "m0"
    assert time.monotonic() - started < 10
    wait_gone(read_pid(pidfile))  # the whole remote process group was killed, not just cut off
    assert ssh.run(["true"]).ok  # the connection is still usable


def test_proxy_jump_through_another_machine(machines: Machines) -> None:
    jump = f"{machines.user}@{machines.addresses[1]}:{machines.port}"
    settings = resolve_ssh(machines.addresses[0], ssh_options(machines, proxy_jump=jump))
    assert [j.hostname for j in settings.proxy_jump] == [machines.addresses[1]]
    logins = {i: machines.log_file(i).read_text().count("Accepted publickey") for i in (0, 1)}
    with SSHTransport("m0", settings) as via:
        result = via.run(["/bin/sh", "-c", "echo $SSH_CONNECTION"])
    assert result.ok and result.stdout.split()[2] == machines.addresses[0]  # the command ran on m0
    # we logged in to the jump host m1 too: the connection to m0 went through it
    assert machines.log_file(1).read_text().count("Accepted publickey") == logins[1] + 1
    assert machines.log_file(0).read_text().count("Accepted publickey") == logins[0] + 1


def test_dead_jump_host_is_refused(machines: Machines) -> None:
    settings = resolve_ssh(machines.addresses[0], ssh_options(machines, proxy_jump=f"127.0.0.1:{machines.port}"))
    with pytest.raises(HostError) as info:
        SSHTransport("m0", settings).connect()
    assert info.value.reason == "refused"


def test_key_from_a_real_ssh_agent(
    machines: Machines, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No identity_file: the agent's key is used. HOME points at an empty dir, so the default
    ~/.ssh/id_* keys Paramiko would also try are not the developer's."""
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(sock.exists, 10, "ssh-agent's socket", interval=0.02)
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        monkeypatch.setenv("HOME", str(tmp_path))
        settings = resolve_ssh(machines.addresses[0], ssh_options(machines, identity_file=None, use_agent=True))
        assert settings.identity_files == () and settings.use_agent
        with pytest.raises(HostError) as info:  # the agent holds no key yet
            SSHTransport("m0", settings).connect()
        assert info.value.reason == "auth-failed"
        subprocess.run(["ssh-add", "-q", machines.identity_file], env=env, check=True, capture_output=True)
        with SSHTransport("m0", settings) as transport:
            assert transport.run(["echo", "via agent"]).stdout == "via agent\n"
    finally:
        agent.kill()
        agent.wait()


@pytest.mark.parametrize("kind", ["missing", "garbage", "encrypted"])
def test_unusable_identity_file_is_auth_failed(machines: Machines, tmp_path: Path, kind: str) -> None:
    key = tmp_path / "key"
    if kind == "garbage":
        key.write_text("not a key\n")
    elif kind == "encrypted":  # no agent holds it, and no passphrase can be asked for
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "secret", "-f", str(key)], check=True)
    settings = resolve_ssh(machines.addresses[0], ssh_options(machines, identity_file=str(key)))
    with pytest.raises(HostError) as info:
        SSHTransport("m0", settings).connect()
    assert info.value.reason == "auth-failed" and str(key) in info.value.detail


def test_connection_prefers_aes_gcm_and_a_calm_reader_thread(ssh: SSHTransport) -> None:
    """ssh_wire.StreamingTransport: OpenSSH accepts AES-GCM (no per-packet HMAC and pure-Python MAC
    compare), and the idle reader thread wakes once a second; commands work as before."""
    from orchestrator.transport.ssh_wire import READER_WAKE_S, StreamingTransport

    assert ssh.run(["true"]).ok
    transport = ssh._clients[-1].get_transport()
    assert isinstance(transport, StreamingTransport)
    assert transport.remote_cipher.endswith("-gcm@openssh.com"), transport.remote_cipher
    assert transport.local_cipher.endswith("-gcm@openssh.com"), transport.local_cipher
    assert transport.sock.gettimeout() == READER_WAKE_S
    t0 = time.monotonic()
    ssh.close()
    assert time.monotonic() - t0 < 0.5  # close does not wait for the reader thread's next wake
