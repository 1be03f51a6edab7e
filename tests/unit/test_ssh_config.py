"""ssh settings resolution: hosts.toml > ssh config file > SSH_DEFAULTS (a temp config file, never ~/.ssh)."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest

from orchestrator.config.schema import SSHOptions
from orchestrator.config.ssh_config import resolve_ssh
from orchestrator.errors import ConfigError

SSH_CONFIG = """
Host gpu-a
    HostName 10.0.0.11
    User alice
    Port 2222
    IdentityFile {tmp}/id_alice
    ProxyJump bastion

Host bastion
    HostName bastion.example.org
    User jump
    Port 2200

Host strict-*
    StrictHostKeyChecking accept-new
    UserKnownHostsFile {tmp}/kh_strict
    ConnectTimeout 7
    ServerAliveInterval 5

Host lonely
    IdentitiesOnly yes
    IdentityFile {tmp}/id_lonely
"""


@pytest.fixture
def config_file(tmp_path: Path) -> str:
    path = tmp_path / "ssh_config"
    path.write_text(SSH_CONFIG.format(tmp=tmp_path))
    return str(path)


def test_alias_resolves_from_ssh_config(config_file: str, tmp_path: Path) -> None:
    r = resolve_ssh("gpu-a", SSHOptions(config_file=config_file))
    assert (r.hostname, r.user, r.port) == ("10.0.0.11", "alice", 2222)
    assert r.identity_files == (str(tmp_path / "id_alice"),)
    assert not r.look_for_keys
    assert [(j.hostname, j.user, j.port) for j in r.proxy_jump] == [("bastion.example.org", "jump", 2200)]
    assert r.known_hosts_name == "[10.0.0.11]:2222"


def test_hosts_toml_overrides_ssh_config(config_file: str, tmp_path: Path) -> None:
    explicit = SSHOptions(
        config_file=config_file, user="bob", port=22, identity_file=str(tmp_path / "id_bob"), proxy_jump="none"
    )
    r = resolve_ssh("gpu-a", explicit)
    assert (r.hostname, r.user, r.port) == ("10.0.0.11", "bob", 22)
    assert r.identity_files == (str(tmp_path / "id_bob"),)
    assert r.proxy_jump == ()
    assert r.known_hosts_name == "10.0.0.11"


def test_defaults_when_nothing_is_set(config_file: str) -> None:
    r = resolve_ssh("10.1.2.3", SSHOptions(config_file=config_file))
    assert (r.hostname, r.port, r.user) == ("10.1.2.3", 22, getpass.getuser())
    assert r.policy == "yes" and r.connect_timeout == 10.0 and r.keepalive == 15 and r.use_agent
    assert r.identity_files == () and r.look_for_keys
    assert r.known_hosts.endswith("/.ssh/known_hosts")


def test_policy_known_hosts_and_timeouts_from_ssh_config(config_file: str, tmp_path: Path) -> None:
    r = resolve_ssh("strict-1", SSHOptions(config_file=config_file))
    assert r.policy == "accept-new"
    assert r.known_hosts == str(tmp_path / "kh_strict")
    assert (r.connect_timeout, r.keepalive) == (7.0, 5)
    r2 = resolve_ssh("strict-1", SSHOptions(config_file=config_file, strict_host_key_checking="yes", known_hosts="/x/kh"))
    assert (r2.policy, r2.known_hosts) == ("yes", "/x/kh")


def test_identities_only_disables_agent(config_file: str) -> None:
    assert not resolve_ssh("lonely", SSHOptions(config_file=config_file)).use_agent
    assert resolve_ssh("lonely", SSHOptions(config_file=config_file, use_agent=True)).use_agent


def test_config_file_none_ignores_the_file(config_file: str) -> None:
    r = resolve_ssh("gpu-a", SSHOptions(config_file="none"))
    assert (r.hostname, r.port) == ("gpu-a", 22)
    assert r.proxy_jump == ()


def test_explicit_proxy_jump_chain_in_order(config_file: str) -> None:
    r = resolve_ssh("10.0.0.5", SSHOptions(config_file=config_file, proxy_jump="u1@hop1:2201,bastion"))
    assert [(j.hostname, j.user, j.port) for j in r.proxy_jump] == [
        ("hop1", "u1", 2201), ("bastion.example.org", "jump", 2200),
    ]


def test_jump_host_with_its_own_proxy_jump_comes_after_it(config_file: str) -> None:
    r = resolve_ssh("10.0.0.5", SSHOptions(config_file=config_file, proxy_jump="gpu-a"))
    assert [j.hostname for j in r.proxy_jump] == ["bastion.example.org", "10.0.0.11"]


def test_missing_explicit_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"ssh.config_file"):
        resolve_ssh("h", SSHOptions(config_file=str(tmp_path / "nope")))
