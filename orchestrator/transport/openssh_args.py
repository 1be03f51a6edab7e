"""How a host's hosts.toml settings become the system `ssh`'s command line (client = "openssh").

hosts.toml's keys go into a small ssh config file tfcluster writes (one per distinct set of keys, in the
private control directory), given to ssh with `-F`: first hosts.toml's values, then `Include` of the
user's config (the file named by `config_file`, else ~/.ssh/config and /etc/ssh/ssh_config, as ssh
reads them), then tfcluster's defaults under `Host *`. ssh keeps the first value it reads for a key,
so the order is hosts.toml > the user's config > tfcluster's defaults, as on the Paramiko path; and
everything else (Include, Match, CertificateFile, GSSAPI, FIDO keys, ProxyCommand) is ssh's own
reading of the user's config. Being a config file, it also reaches the ssh that ProxyJump starts for
each jump host: a jump host shares the key, known_hosts, policy and timeouts, as on the Paramiko path.
`user` and `port` apply to the target only, so they are command-line options (`-l`, `-p`), with
`proxy_jump` (`-J`).

Connections are shared (ControlMaster) through sockets named `%C` (a hash of the destination) in a
directory private to this user, short enough for a Unix socket path on Linux and macOS.
"""

from __future__ import annotations

import hashlib
import math
import os
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.config.schema import SSH_DEFAULTS, SSHOptions
from orchestrator.errors import ConfigError, TfclusterError

SSH = "ssh"
CONTROL_DIR_ENV = "TFCLUSTER_SSH_CONTROL_DIR"  # where the shared-connection sockets live (else CONTROL_BASES)
SYSTEM_CONFIG = "/etc/ssh/ssh_config"
USER_CONFIG = "~/.ssh/config"
# A Unix socket path holds 104 bytes on macOS (108 on Linux); ssh names a new socket `<path>.<16 random
# chars>` before renaming it, and %C is 40 hex digits: the directory gets what is left.
SOCKET_PATH_MAX = 104
CONTROL_NAME_LEN = 40 + 17 + 1


class ControlDirError(TfclusterError):
    """The directory for shared-connection sockets is not private to this user (or cannot be made)."""

    exit_code = 2


@dataclass(frozen=True)
class Destination:
    """One host as ssh is told to reach it: the config file, the target-only options, the address."""

    config_file: str  # the file tfcluster wrote (`-F`)
    target_options: tuple[str, ...]  # -l, -p, -J
    address: str
    persist_s: int  # ControlPersist; 0: no shared connection
    connect_timeout: float  # for our own waits around ssh (a master's start)

    def argv(self, *extra: str, control_dir: str | None = None, batch: bool = True,
             master: str = "no") -> list[str]:
        """`ssh -F <file> [target options] [control options] <extra...> -- <address>`; a command follows."""
        out = [SSH, "-F", self.config_file, *self.target_options]
        if batch:
            out += ["-o", "BatchMode=yes"]
        if control_dir is not None and self.persist_s > 0:
            out += ["-o", f"ControlPath={escape_tokens(control_dir)}/%C", "-o", f"ControlMaster={master}"]
            if master != "no":
                out += ["-o", f"ControlPersist={self.persist_s}s"]
        else:
            out += ["-o", "ControlPath=none", "-o", "ControlMaster=no"]
        return [*out, *extra, "--", self.address]


def escape_tokens(value: str) -> str:
    """ssh expands %-tokens in paths (IdentityFile, UserKnownHostsFile, ControlPath): a literal % is %%."""
    return value.replace("%", "%%")


def _quoted(key: str, value: str) -> str:
    """A config line `Key "value"`; a value ssh's config syntax cannot hold is refused."""
    if '"' in value or any(ord(c) < 32 for c in value):
        raise ConfigError("hosts.toml", f"ssh.{key}", f"{value!r}: a double quote or control character cannot "
                          'be passed to ssh (client = "openssh")')
    return f'"{value}"'


def config_text(explicit: SSHOptions) -> str:
    """The ssh config file for one set of hosts.toml [ssh] keys (see the module docstring)."""
    lines = ["# Written by tfcluster (client = \"openssh\"): hosts.toml's [ssh], then the user's ssh config,",
             "# then tfcluster's defaults. ssh keeps the first value it reads for a key."]
    if explicit.identity_file is not None:
        lines.append(f"IdentityFile {_quoted('identity_file', escape_tokens(explicit.identity_file))}")
    if explicit.use_agent is False:
        lines.append("IdentityAgent none")
    if explicit.known_hosts is not None:
        lines.append(f"UserKnownHostsFile {_quoted('known_hosts', escape_tokens(explicit.known_hosts))}")
    if explicit.strict_host_key_checking is not None:
        lines.append(f"StrictHostKeyChecking {explicit.strict_host_key_checking}")
    if explicit.connect_timeout is not None:
        lines.append(f"ConnectTimeout {math.ceil(explicit.connect_timeout)}")
    if explicit.keepalive is not None:
        lines.append(f"ServerAliveInterval {explicit.keepalive}")
    config_file = explicit.config_file
    if config_file is None:
        lines += [f"Include {_quoted('config_file', os.path.expanduser(USER_CONFIG))}", f"Include {SYSTEM_CONFIG}"]
    elif config_file.lower() != "none":
        path = os.path.expanduser(os.path.expandvars(config_file))
        if not os.path.exists(path):
            raise ConfigError("hosts.toml", "ssh.config_file", f"ssh config file {path} does not exist")
        lines.append(f"Include {_quoted('config_file', os.path.abspath(path))}")
    # The defaults, for every host whatever the included files' last Host block: the Paramiko path's
    # (a host key must be known: "ask" would prompt, or fail in BatchMode), and ssh's messages only when
    # something fails (no "Permanently added" line in a command's stderr).
    lines += ["Host *", f"  StrictHostKeyChecking {SSH_DEFAULTS.strict_host_key_checking}",
              f"  ConnectTimeout {math.ceil(SSH_DEFAULTS.connect_timeout or 10)}",
              f"  ServerAliveInterval {SSH_DEFAULTS.keepalive}", "  LogLevel ERROR"]
    return "\n".join(lines) + "\n"


def destination(address: str, explicit: SSHOptions, *, what: str = "address") -> Destination:
    """How ssh reaches `address` with these hosts.toml keys (writes the config file once)."""
    if not address or address.startswith("-") or any(c.isspace() or ord(c) < 32 for c in address):
        raise ConfigError("hosts.toml", what, f"{address!r} is not a host ssh can be given")
    target: list[str] = []
    if explicit.user is not None:
        target += ["-l", explicit.user]
    if explicit.port is not None:
        target += ["-p", str(explicit.port)]
    if explicit.proxy_jump is not None and explicit.proxy_jump.lower() != "none":
        if explicit.proxy_jump.startswith("-"):
            raise ConfigError("hosts.toml", "ssh.proxy_jump", f"{explicit.proxy_jump!r} is not a jump host")
        target += ["-J", explicit.proxy_jump]
    persist = explicit.control_persist if explicit.control_persist is not None else SSH_DEFAULTS.control_persist
    timeout = explicit.connect_timeout or SSH_DEFAULTS.connect_timeout or 10.0
    return Destination(write_config(config_text(explicit)), tuple(target), address, int(persist or 0), timeout)


def write_config(text: str) -> str:
    """The config file holding `text` in the control directory, written (privately, atomically) once."""
    path = os.path.join(control_dir(), "cfg-" + hashlib.sha256(text.encode()).hexdigest()[:16])
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".cfg-")  # mode 0600 from its first byte
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return path


def control_dir() -> str:
    """This user's private directory for ssh config files and shared-connection sockets (mode 0700, owned
    by us, not a symlink: another user must not be able to plant a socket or a config there)."""
    path = os.environ.get(CONTROL_DIR_ENV) or _default_control_dir()
    if len(path) + 1 + CONTROL_NAME_LEN > SOCKET_PATH_MAX:
        raise ControlDirError(f"{path}: too long for a Unix socket path (at most "
                              f"{SOCKET_PATH_MAX - 1 - CONTROL_NAME_LEN} characters); set {CONTROL_DIR_ENV}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ControlDirError(f"cannot create {path}: {exc.strerror}") from exc
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ControlDirError(f"{path} must be a directory owned by you with mode 0700 (it holds the ssh "
                              f"connections tfcluster shares); remove it or set {CONTROL_DIR_ENV}")
    return path


def _default_control_dir() -> str:
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    base = runtime if runtime and len(runtime) <= 30 and os.path.isdir(runtime) else "/tmp"
    return os.path.join(base, f"tfcluster-ssh-{os.getuid()}")


def command_args(extra: Sequence[str]) -> list[str]:
    """Options every command (not a master) runs with: no pty, no escape character."""
    return ["-T", "-e", "none", *extra]
