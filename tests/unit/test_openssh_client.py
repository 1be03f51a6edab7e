"""The OpenSSH client's pure parts: hosts.toml keys -> ssh's config file and command line (openssh_args), ssh's
words -> HostError reasons (openssh_faults), the pid marker among ssh's own lines, the private control
directory, and the transport registry (one key per kind of orchestrator.config.kinds)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.config.kinds import TRANSPORT_KINDS, transport_kind
from orchestrator.config.schema import SSHOptions
from orchestrator.errors import ConfigError
from orchestrator.transport.factory import BUILDERS, transport_for
from orchestrator.transport.openssh_args import (
    CONTROL_DIR_ENV,
    ControlDirError,
    config_text,
    control_dir,
    destination,
)
from orchestrator.transport.openssh_faults import connect_error, connect_reason, lost_connection
from orchestrator.transport.openssh_streams import find_pid_marker
from orchestrator.transport.shell_wrap import PID_MARKER
from tests.plans import tiny_plan


@pytest.fixture(autouse=True)
def private_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A control directory of its own (short: /tmp), removed at the end."""
    path = Path("/tmp") / f"tfc-unit-{os.getpid()}"
    monkeypatch.setenv(CONTROL_DIR_ENV, str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_hosts_toml_keys_come_first_then_the_users_config_then_the_defaults(tmp_path: Path) -> None:
    user_config = tmp_path / "my config"
    user_config.write_text("Host *\n")
    text = config_text(SSHOptions(identity_file="~/k%1", known_hosts="/k/known", strict_host_key_checking="accept-new",
                                  connect_timeout=2.5, keepalive=0, use_agent=False, config_file=str(user_config)))
    lines = text.splitlines()
    include = lines.index(f'Include "{user_config}"')
    for key in ('IdentityFile "~/k%%1"', "IdentityAgent none", 'UserKnownHostsFile "/k/known"',
                "StrictHostKeyChecking accept-new", "ConnectTimeout 3", "ServerAliveInterval 0"):
        assert lines.index(key) < include, key  # ssh keeps the first value: hosts.toml wins
    assert lines[include + 1:] == ["Host *", "  StrictHostKeyChecking yes", "  ConnectTimeout 10",
                                   "  ServerAliveInterval 15", "  LogLevel ERROR"]


def test_without_config_file_ssh_reads_the_users_and_the_systems_config() -> None:
    lines = config_text(SSHOptions()).splitlines()
    assert lines[2:4] == [f'Include "{os.path.expanduser("~/.ssh/config")}"', "Include /etc/ssh/ssh_config"]
    assert not any(line.startswith("Include") for line in config_text(SSHOptions(config_file="none")).splitlines())


def test_values_ssh_cannot_hold_are_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        config_text(SSHOptions(known_hosts='/a"b'))
    assert info.value.key == "ssh.known_hosts"
    with pytest.raises(ConfigError) as info:
        config_text(SSHOptions(config_file=str(tmp_path / "missing")))
    assert info.value.key == "ssh.config_file"
    with pytest.raises(ConfigError):
        destination("-oProxyCommand=evil", SSHOptions(config_file="none"))
    with pytest.raises(ConfigError):
        destination("host", SSHOptions(config_file="none", proxy_jump="-oProxyCommand=evil"))


def test_command_line_target_options_and_shared_connection(private_dir: Path) -> None:
    dest = destination("node-1", SSHOptions(user="me", port=2222, proxy_jump="bastion", config_file="none"))
    argv = dest.argv("-T", control_dir=control_dir())
    assert argv[:3] == ["ssh", "-F", dest.config_file] and Path(dest.config_file).parent == private_dir
    assert argv[3:9] == ["-l", "me", "-p", "2222", "-J", "bastion"]
    assert "BatchMode=yes" in argv and f"ControlPath={private_dir}/%C" in argv and "ControlMaster=no" in argv
    assert argv[-3:] == ["-T", "--", "node-1"]
    master = dest.argv("-N", "-f", control_dir=control_dir(), master="auto", batch=False)
    assert "ControlMaster=auto" in master and "ControlPersist=60s" in master and "BatchMode=yes" not in master
    off = destination("node-1", SSHOptions(config_file="none", control_persist=0))
    assert "ControlPath=none" in off.argv(control_dir=control_dir())
    assert stat.S_IMODE(os.stat(dest.config_file).st_mode) == 0o600


def test_control_dir_is_private_and_short(private_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert control_dir() == str(private_dir)
    assert stat.S_IMODE(private_dir.stat().st_mode) == 0o700
    private_dir.chmod(0o755)  # another user could plant a socket or a config file there
    with pytest.raises(ControlDirError):
        control_dir()
    private_dir.chmod(0o700)
    monkeypatch.setenv(CONTROL_DIR_ENV, "/tmp/" + "x" * 60)
    with pytest.raises(ControlDirError, match="too long"):
        control_dir()


@pytest.mark.parametrize(("stderr", "reason"), [
    ("ssh: connect to host 10.0.0.1 port 22: Connection refused", "refused"),
    ("ssh: connect to host 10.0.0.1 port 22: Connection timed out", "timeout"),
    ("Connection timed out during banner exchange", "timeout"),
    ("ssh: Could not resolve hostname nope: Name or service not known", "unreachable"),
    ("me@host: Permission denied (publickey).", "auth-failed"),
    ("No ED25519 host key is known for [127.0.0.2]:2222 and you have requested strict checking.\n"
     "Host key verification failed.", "hostkey-unknown"),
    ("@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n@@@@@\nHost key verification failed.",
     "hostkey-changed"),
    ("kex_exchange_identification: Connection closed by remote host", "unreachable"),
])
def test_ssh_messages_map_to_the_paramiko_paths_reasons(stderr: str, reason: str) -> None:
    assert connect_reason(stderr) == reason
    error = connect_error("m0", "node", stderr)
    assert error.host == "m0" and "\n" not in str(error) and "@@@" not in str(error)


def test_a_broken_connection_is_told_from_a_command_that_exited_255() -> None:
    assert lost_connection("Connection to 127.0.0.2 closed by remote host.")
    assert lost_connection("client_loop: send disconnect: Broken pipe")
    assert not lost_connection("my program failed\n")


def test_pid_marker_is_found_after_ssh_s_own_lines() -> None:
    assert find_pid_marker(PID_MARKER + b"42\nrest") == (42, b"rest")
    assert find_pid_marker(b"Warning: something\n" + PID_MARKER + b"7\nerr\n") == (7, b"Warning: something\nerr\n")
    assert find_pid_marker(PID_MARKER + b"4") == (None, PID_MARKER + b"4")  # the line is not complete yet
    assert find_pid_marker(b"no marker\n") == (None, b"no marker\n")


def test_the_registry_builds_every_kind_and_only_the_clients_transport() -> None:
    assert set(BUILDERS) == set(TRANSPORT_KINDS) == {"local", "slurm", "paramiko", "openssh"}
    assert transport_kind("ssh", None) == "paramiko" and transport_kind("local", "openssh") == "local"
    host = tiny_plan().hosts[0]
    ssh = host.ssh.model_copy(update={"client": "openssh", "config_file": "none"})
    transport = transport_for(dataclasses.replace(host, transport="ssh", ssh=ssh))
    assert type(transport).__module__ == "orchestrator.transport.openssh"


@pytest.mark.parametrize(("client", "dialled"), [("openssh", "127.0.0.9"), ("paramiko", "tfc-alias")])
def test_the_plan_dials_what_the_hosts_client_resolves(tmp_path: Path, client: str, dialled: str) -> None:
    """An alias defined in an Included file: the OpenSSH client's plan gives the tasks its HostName (`ssh -G`);
    Paramiko's parser does not follow Include (its host fails to connect, saying so)."""
    from orchestrator.plan.from_file import plan_file

    (tmp_path / "inc.conf").write_text("Host tfc-alias\n  HostName 127.0.0.9\n  Port 2222\n")
    (tmp_path / "ssh_config").write_text(f"Include {tmp_path}/inc.conf\n")
    (tmp_path / "x.py").write_text("")
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(f'[ssh]\nclient = "{client}"\nconfig_file = "{tmp_path}/ssh_config"\n'
                     '[[hosts]]\nname = "a"\naddress = "tfc-alias"\nroles = ["ps"]\n'
                     '[[hosts]]\nname = "b"\naddress = "127.0.0.3"\nroles = ["chief", "worker"]\n'
                     '[training]\ncommand = "python x.py"\nsync = ["x.py"]\n')
    plan = plan_file(hosts)
    assert next(t for t in plan.tasks if t.job == "ps").address == dialled
