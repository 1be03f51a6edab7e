"""Who the host is and who we are: known_hosts, identity files and the host-key policy, for SSHTransport.

Host keys are checked against `known_hosts` under the policy: `yes` refuses an unknown key,
`accept-new` records it, `no` accepts it with a loud warning; a CHANGED key is refused always.
known_hosts and key files are parsed once per content (a sha256 of their bytes) per process, not once
per host: a fan-out to hundreds of hosts would otherwise parse them hundreds of times.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Sequence

import paramiko

from orchestrator.config.ssh_config import ResolvedSSH
from orchestrator.errors import HostError

log = logging.getLogger("tfcluster.ssh")
_KNOWN_HOSTS_LOCK = threading.Lock()  # hosts connecting in parallel may append to one known_hosts

_KNOWN_HOSTS_CACHE: dict[str, tuple[bytes, paramiko.HostKeys]] = {}
_IDENTITY_CACHE: dict[str, tuple[bytes, str | None, paramiko.PKey | None]] = {}


def _digest(path: str) -> bytes | None:
    """A digest of the file's bytes (None: unreadable). Reading is cheap, parsing is not; a digest,
    unlike mtime (coarse clock ticks), never misses a rewrite."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).digest()
    except OSError:
        return None


def load_known_hosts(host: str, path: str) -> paramiko.HostKeys:
    """known_hosts parsed once per content, not once per host: a fan-out to hundreds of hosts would
    otherwise parse a user's long known_hosts hundreds of times. Callers only read the result."""
    digest = _digest(path) if os.path.exists(path) else b""
    with _KNOWN_HOSTS_LOCK:
        cached = _KNOWN_HOSTS_CACHE.get(path)
        if cached is not None and digest is not None and cached[0] == digest:
            return cached[1]
    keys = paramiko.HostKeys()
    if digest != b"":
        try:
            keys.load(path)
        except (OSError, UnicodeDecodeError) as exc:
            raise HostError(host, "hostkey-unknown", f"cannot read known_hosts {path}: {exc}") from exc
    if digest is not None:
        with _KNOWN_HOSTS_LOCK:
            _KNOWN_HOSTS_CACHE[path] = (digest, keys)
    return keys


def _append_known_host(path: str, name: str, key: paramiko.PKey) -> None:
    with _KNOWN_HOSTS_LOCK:
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a") as f:
            f.write(f"{name} {key.get_name()} {key.get_base64()}\n")


def identity(path: str) -> tuple[str | None, paramiko.PKey | None]:
    """(why the key file cannot be used or None, the loaded key when it needs no passphrase), once
    per file content, like known_hosts: Paramiko would otherwise parse it again for every host."""
    if not os.path.exists(path):
        return f"identity file {path} does not exist", None
    digest = _digest(path)
    cached = _IDENTITY_CACHE.get(path)
    if cached is not None and cached[0] == digest:
        return cached[1], cached[2]
    problem, key = _load_identity(path)
    if digest is not None:
        _IDENTITY_CACHE[path] = (digest, problem, key)
    return problem, key


def _load_identity(path: str) -> tuple[str | None, paramiko.PKey | None]:
    """An encrypted key is fine here: the agent may hold it, and Paramiko reports it as an
    authentication failure otherwise."""
    try:
        return None, paramiko.PKey.from_path(path)
    except paramiko.PasswordRequiredException:
        return None, None
    except (paramiko.SSHException, OSError, ValueError, TypeError) as exc:
        if "password" in str(exc).lower():  # cryptography's way of saying "encrypted"
            return None, None
        reason = (str(exc).split(".")[0] or type(exc).__name__)[:120]
        return f"identity file {path} is not a usable private key ({reason})", None


def auth_keys(paths: Sequence[str], keys: Sequence[paramiko.PKey | None]) -> tuple[paramiko.PKey | None, list[str] | None]:
    """(pkey, key_filename) for SSHClient.connect: the one identity file's already loaded key, unless a
    certificate sits next to it (Paramiko loads `<key>-cert.pub` only from a key_filename)."""
    if len(paths) == 1 and keys[0] is not None and not os.path.exists(f"{paths[0]}-cert.pub"):
        return keys[0], None
    return None, list(paths) or None


class HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Called by Paramiko only when known_hosts has no key of the offered type for the host."""

    def __init__(self, host: str, settings: ResolvedSSH, known: paramiko.HostKeys, warnings: list[str]) -> None:
        self.host = host
        self.settings = settings
        self.known = known
        self.warnings = warnings  # the transport's: `check` shows them in the host's row

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        s = self.settings
        fingerprint = key.fingerprint if hasattr(key, "fingerprint") else key.get_name()
        name = s.known_hosts_name
        if self.known.lookup(name):
            # known_hosts holds a key of another type for this host: treat it as a changed key.
            raise HostError(
                self.host, "hostkey-changed",
                f"{name} offered a {key.get_name()} key ({fingerprint}) but {s.known_hosts} records a "
                "different key for it; if the machine was reinstalled, remove its line from known_hosts",
            )
        if s.policy == "accept-new":
            _append_known_host(s.known_hosts, name, key)
            log.info("host %s: new host key %s recorded in %s", self.host, fingerprint, s.known_hosts)
            return
        if s.policy == "no":
            message = (
                f"HOST KEY NOT VERIFIED for host {self.host} ({name}, {fingerprint}): "
                "strict_host_key_checking = \"no\" lets anyone on the network path impersonate it"
            )
            self.warnings.append(message)
            log.warning(message)
            return
        raise HostError(
            self.host, "hostkey-unknown",
            f"{name} is not in {s.known_hosts} (key {fingerprint}); add it (ssh-keyscan, or connect once "
            "with ssh) or set strict_host_key_checking = \"accept-new\"",
        )
