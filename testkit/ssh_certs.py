"""A certificate authority for user keys, as a site that grants SSH access by certificate has one: sshd trusts
it (`TrustedUserCAKeys`, testkit/sshd.py start_machines(user_ca=True)) and a user key signed by it logs in
without being in authorized_keys."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from testkit.tools import find_tool

SSH_KEYGEN = find_tool("ssh-keygen", "TFCLUSTER_OPENSSH_PATH") or "ssh-keygen"


def new_user_ca(path: Path) -> Path:
    """A CA key pair at `path` (and `path`.pub, the line sshd's TrustedUserCAKeys names)."""
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "tfcluster-test-user-ca", "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return path


def sign_user_key(ca: Path, public_key: str | os.PathLike[str], principal: str) -> Path:
    """Sign a user's public key for `principal`, valid for an hour: ssh-keygen writes `<key>-cert.pub`."""
    subprocess.run([SSH_KEYGEN, "-q", "-s", str(ca), "-I", "tfcluster-test-cert", "-n", principal, "-V", "-5m:+1h",
                    str(public_key)], check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)
    return Path(str(public_key).removesuffix(".pub") + "-cert.pub")
