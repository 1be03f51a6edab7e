"""known_hosts and identity files are parsed once per content, and a rewrite is always seen.

A fan-out to many hosts reads them once per host; the cache must never serve a stale parse, even when
a file is rewritten in place with the same size within one tick of the filesystem clock (the case an
mtime check misses). No network: the files are real, the keys generated here."""

from __future__ import annotations

import subprocess
from pathlib import Path

import paramiko

from orchestrator.transport.ssh_keys import identity as _identity
from orchestrator.transport.ssh_keys import load_known_hosts as _load_known_hosts


def _keygen(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"key-{name}"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def _known_line(host: str, keyfile: Path) -> str:
    key = paramiko.Ed25519Key.from_private_key_file(str(keyfile))
    return f"{host} {key.get_name()} {key.get_base64()}\n"


def test_known_hosts_is_parsed_once_and_a_same_size_rewrite_is_seen(tmp_path: Path) -> None:
    key_a, key_b = _keygen(tmp_path, "a"), _keygen(tmp_path, "b")
    known = tmp_path / "known_hosts"
    known.write_text(_known_line("host1", key_a))
    first = _load_known_hosts("h", str(known))
    assert _load_known_hosts("h", str(known)) is first  # cached: the same parse for every host
    assert first.lookup("host1") is not None
    # Same name, same key type, another key: same size, same inode, probably the same mtime tick.
    known.write_text(_known_line("host1", key_b))
    second = _load_known_hosts("h", str(known))
    assert second is not first
    assert second.lookup("host1")["ssh-ed25519"].get_base64() != first.lookup("host1")["ssh-ed25519"].get_base64()


def test_missing_known_hosts_then_created(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    assert len(_load_known_hosts("h", str(known))) == 0
    known.write_text(_known_line("host1", _keygen(tmp_path, "a")))
    assert _load_known_hosts("h", str(known)).lookup("host1") is not None


def test_identity_problem_follows_the_file(tmp_path: Path) -> None:
    key = _keygen(tmp_path, "a")
    path = tmp_path / "id"
    assert "does not exist" in (_identity(str(path))[0] or "")
    path.write_text("not a key\n")
    assert "not a usable private key" in (_identity(str(path))[0] or "")
    path.write_bytes(key.read_bytes())
    assert _identity(str(path))[0] is None
