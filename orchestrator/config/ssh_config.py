"""A host's effective SSH settings: hosts.toml > ~/.ssh/config > SSH_DEFAULTS, as OpenSSH layers
command-line options over its config file.

hosts.toml's `[ssh]`/`[hosts.ssh]` values win (`explicit_ssh`: what the plan keeps); the host's `address`
is looked up as an alias in the ssh config file (HostName, User, Port, IdentityFile, ProxyJump,
UserKnownHostsFile, StrictHostKeyChecking, ConnectTimeout, ServerAliveInterval, IdentitiesOnly); what
is still unset comes from `SSH_DEFAULTS`. `ssh.config_file = "none"` disables the file (tests use it so
they never read the developer's ~/.ssh). `resolve_hosts` does this for every host of a hosts.toml, each
file parsed once, and refuses two entries that are one machine once aliases are resolved.
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.config.kinds import transport_kind
from orchestrator.config.schema import SSH_DEFAULTS, Config, HostConfig, SSHOptions
from orchestrator.errors import ConfigError

if TYPE_CHECKING:
    import paramiko

DEFAULT_CONFIG_FILE = "~/.ssh/config"
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
# ssh config keywords Paramiko keeps but never acts on (it does not follow Include, load a CertificateFile,
# speak GSSAPI without extra packages, or use a FIDO key provider).
PARAMIKO_GAPS = {"include": "Include", "certificatefile": "CertificateFile",
                 "gssapiauthentication": "GSSAPIAuthentication", "securitykeyprovider": "SecurityKeyProvider",
                 "pkcs11provider": "PKCS11Provider"}
_POLICY_FROM_OPENSSH = {"yes": "yes", "ask": "yes", "accept-new": "accept-new", "no": "no", "off": "no"}


@dataclass(frozen=True)
class ResolvedSSH:
    """Everything needed to open one SSH connection. `proxy_jump` lists the jump hosts, first hop first."""

    alias: str  # the address as written in hosts.toml
    hostname: str  # what is actually dialled
    port: int
    user: str
    identity_files: tuple[str, ...]  # expanded paths; empty = agent and the default ~/.ssh/id_* keys
    use_agent: bool
    policy: str  # "yes" | "accept-new" | "no"
    known_hosts: str  # expanded path
    connect_timeout: float
    keepalive: int  # seconds between keepalive packets, 0 = off
    proxy_jump: tuple[ResolvedSSH, ...] = ()
    # ssh config lines for this host that Paramiko does not act on (PARAMIKO_GAPS), as `Key value`: a
    # failure to reach the host names them and suggests client = "openssh" (`paramiko_hint`).
    paramiko_gaps: tuple[str, ...] = ()

    @property
    def look_for_keys(self) -> bool:
        """OpenSSH tries its default key files only when no IdentityFile is given."""
        return not self.identity_files

    @property
    def known_hosts_name(self) -> str:
        """How this host is named in known_hosts (OpenSSH: `[host]:port` unless the port is 22)."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"

    def paramiko_hint(self) -> str:
        """" (the ssh config's <lines> ...: set client = "openssh")", or "" when Paramiko misses nothing."""
        if not self.paramiko_gaps:
            return ""
        return (f" (the ssh config's {'; '.join(self.paramiko_gaps)} is not read by the Paramiko client: "
                'set `client = "openssh"` in [ssh] to reach the host as `ssh` does)')

    def describe(self) -> str:
        via = "".join(f" via {j.user}@{j.hostname}:{j.port}" for j in self.proxy_jump)
        return f"{self.user}@{self.hostname}:{self.port}{via}"


@dataclass(frozen=True)
class HostsSSH:
    """Every host's SSH settings, by host name."""

    explicit: dict[str, SSHOptions]  # what hosts.toml says, every host: the plan keeps it
    resolved: dict[str, ResolvedSSH]  # SSH hosts only: what OpenSSH would dial


def explicit_ssh(config: Config, host: HostConfig) -> SSHOptions:
    """What hosts.toml says for this host: [ssh] < [hosts.ssh]. Still-unset keys are filled from
    ~/.ssh/config and then SSH_DEFAULTS by the transport, as OpenSSH does with command-line options."""
    merged: dict[str, object] = {}
    for layer in (config.ssh, host.ssh):
        if layer is not None:
            merged.update({k: v for k, v in layer.model_dump().items() if v is not None})
    return SSHOptions.model_validate(merged)


def resolve_hosts(config: Config, source: str) -> HostsSSH:
    """Each host's settings; two [[hosts]] entries that are one machine as OpenSSH would dial them
    (HostName, Port, ProxyJump) are refused: the plan would start twice the tasks on it."""
    parsed: dict[str | None, paramiko.SSHConfig | None] = {}
    out = HostsSSH({}, {})
    seen: dict[tuple[str, int, tuple[tuple[str, int], ...]], int] = {}
    for i, host in enumerate(config.hosts):
        explicit = out.explicit[host.name] = explicit_ssh(config, host)
        if host.transport != "ssh":
            continue  # local hosts are this machine by definition: several may share it
        try:
            if explicit.config_file not in parsed:
                parsed[explicit.config_file] = load_ssh_config(explicit.config_file)
            r = out.resolved[host.name] = resolve_ssh(
                host.address, explicit, ssh_config=parsed[explicit.config_file], load_config_file=False
            )
        except ConfigError as exc:  # the ssh config names no file; this error is about ours
            key = exc.key if exc.key and exc.source == "hosts.toml" else f"hosts[{i}].address"
            raise ConfigError(source, key, exc.message, suggestion=exc.suggestion) from None
        if transport_kind(host.transport, explicit.client) == "openssh":
            r = out.resolved[host.name] = _as_openssh_dials(r, host.address, explicit)
        endpoint = (r.hostname.lower(), r.port, tuple((j.hostname.lower(), j.port) for j in r.proxy_jump))
        if endpoint in seen:
            raise ConfigError(source, f"hosts[{i}].address", _same_machine(config, i, seen[endpoint], r))
        seen[endpoint] = i
    return out


def _as_openssh_dials(r: ResolvedSSH, address: str, explicit: SSHOptions) -> ResolvedSSH:
    """`r` with the HostName and Port the system's ssh resolves `address` to (`ssh -G`), for a host reached
    by client = "openssh": its config may define the alias where Paramiko's parser does not look
    (Include, Match). Unchanged when ssh cannot say (not installed, a config it refuses: the first command
    reports that)."""
    if address.startswith("-"):
        return r  # not an option for ssh: the transport refuses the address
    argv = ["ssh", "-G"]
    if explicit.config_file is not None:
        argv += ["-F", os.devnull if explicit.config_file.lower() == "none" else _expand(explicit.config_file)]
    if explicit.port is not None:
        argv += ["-p", str(explicit.port)]
    if explicit.user is not None:
        argv += ["-l", explicit.user]
    try:
        done = subprocess.run([*argv, "--", address], capture_output=True, text=True, timeout=10, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return r
    said = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    if done.returncode != 0 or not said.get("hostname") or not said.get("port", "").isdigit():
        return r
    return dataclasses.replace(r, hostname=said["hostname"], port=int(said["port"]))


def _same_machine(config: Config, i: int, j: int, r: ResolvedSSH) -> str:
    host, other = config.hosts[i], config.hosts[j]
    address = host.address.strip().lower()
    if address == other.address.strip().lower():
        return (f"host `{host.name}` has the same SSH address and port ({address}:{r.port}) as `{other.name}` "
                f"(hosts[{j}]); list each machine once and give it several tasks with `gpus` or `workers`")
    return (f"host `{host.name}` (`{host.address}`) and `{other.name}` (`{other.address}`, hosts[{j}]) are the same "
            f"machine once the ssh config is applied ({r.hostname}:{r.port}); list each machine once and give it "
            "several tasks with `gpus` or `workers`")


def _expand(path: str) -> str:
    return os.path.expanduser(os.path.expandvars(path))


def load_ssh_config(config_file: str | None) -> paramiko.SSHConfig | None:
    """The parsed ssh config file, or None when disabled ("none") or absent (the default file only)."""
    if config_file is not None and config_file.lower() == "none":
        return None
    path = _expand(config_file or DEFAULT_CONFIG_FILE)
    if not os.path.exists(path):
        if config_file is not None:
            raise ConfigError("hosts.toml", "ssh.config_file", f"ssh config file {path} does not exist")
        return None
    from orchestrator.deferred_invoke import defer_invoke

    defer_invoke()
    import paramiko  # only when there is a file to parse: `plan` of a config without one never loads it

    try:
        return paramiko.SSHConfig.from_path(path)
    except (OSError, UnicodeDecodeError, paramiko.ConfigParseError) as exc:
        raise ConfigError(path, None, f"cannot read ssh config: {exc}") from exc


def _lookup(ssh_config: paramiko.SSHConfig | None, alias: str) -> dict[str, Any]:
    if ssh_config is None:
        return {}
    return dict(ssh_config.lookup(alias))


def _bool(value: str | None) -> bool | None:
    if value is None:
        return None
    return value.strip().lower() in ("yes", "true", "on")


def _parse_jump(spec: str) -> tuple[str | None, str, int | None]:
    """`[user@]host[:port]` (also `ssh://user@host:port`) -> (user, host, port)."""
    spec = spec.strip()
    if spec.startswith("ssh://"):
        spec = spec[len("ssh://") :]
    user, _, hostport = spec.rpartition("@")
    host, port = hostport, None
    if hostport.startswith("["):  # [v6addr]:port
        host, _, rest = hostport[1:].partition("]")
        if rest.startswith(":") and rest[1:].isdigit():
            port = int(rest[1:])
    elif hostport.count(":") == 1:
        h, _, p = hostport.partition(":")
        if p.isdigit():
            host, port = h, int(p)
    return (user or None), host, port


def resolve_ssh(
    address: str,
    explicit: SSHOptions,
    *,
    ssh_config: paramiko.SSHConfig | None = None,
    load_config_file: bool = True,
    _depth: int = 0,
) -> ResolvedSSH:
    """Resolve the effective settings for `address` (an IP, DNS name or ssh-config alias).

    `ssh_config`: an already parsed file (else it is loaded from `explicit.config_file`)."""
    if ssh_config is None and load_config_file:
        ssh_config = load_ssh_config(explicit.config_file)
    found = _lookup(ssh_config, address)

    def pick(explicit_value: Any, config_value: Any, default: Any) -> Any:
        for value in (explicit_value, config_value):
            if value is not None:
                return value
        return default

    hostname = str(found.get("hostname") or address)
    port = int(pick(explicit.port, found.get("port"), SSH_DEFAULTS.port))
    user = str(pick(explicit.user, found.get("user"), None) or getpass.getuser())
    if explicit.identity_file is not None:
        identity_files: tuple[str, ...] = (_expand(explicit.identity_file),)
    else:
        identity_files = tuple(_expand(p) for p in found.get("identityfile", []))
    identities_only = _bool(found.get("identitiesonly")) or False
    use_agent = bool(pick(explicit.use_agent, False if identities_only else None, SSH_DEFAULTS.use_agent))
    config_policy = found.get("stricthostkeychecking")
    if config_policy is not None:
        config_policy = _POLICY_FROM_OPENSSH.get(str(config_policy).lower(), "yes")
    policy = str(pick(explicit.strict_host_key_checking, config_policy, SSH_DEFAULTS.strict_host_key_checking))
    config_known_hosts = found.get("userknownhostsfile")
    if config_known_hosts:
        config_known_hosts = str(config_known_hosts).split()[0]  # OpenSSH allows several; we use the first
    known_hosts = _expand(str(pick(explicit.known_hosts, config_known_hosts, DEFAULT_KNOWN_HOSTS)))
    connect_timeout = float(pick(explicit.connect_timeout, found.get("connecttimeout"), SSH_DEFAULTS.connect_timeout))
    keepalive = int(pick(explicit.keepalive, found.get("serveraliveinterval"), SSH_DEFAULTS.keepalive))

    jumps: list[ResolvedSSH] = []
    jump_spec = pick(explicit.proxy_jump, found.get("proxyjump"), None)
    if jump_spec and str(jump_spec).lower() != "none":
        if _depth > 8:
            raise ConfigError("hosts.toml", "ssh.proxy_jump", f"ProxyJump chain for {address} is too deep (a loop?)")
        for hop in str(jump_spec).split(","):
            hop_user, hop_host, hop_port = _parse_jump(hop)
            # A jump host is resolved through the ssh config like any host; it shares only the key,
            # known_hosts, policy and timeout settings of hosts.toml, not the target's user/port.
            hop_explicit = SSHOptions(
                user=hop_user, port=hop_port, identity_file=explicit.identity_file,
                strict_host_key_checking=explicit.strict_host_key_checking, known_hosts=explicit.known_hosts,
                connect_timeout=explicit.connect_timeout, keepalive=explicit.keepalive, use_agent=explicit.use_agent,
            )
            hop_resolved = resolve_ssh(
                hop_host, hop_explicit, ssh_config=ssh_config, load_config_file=False, _depth=_depth + 1
            )
            jumps.extend(hop_resolved.proxy_jump)  # a jump host's own ProxyJump comes before it
            jumps.append(_without_jumps(hop_resolved))

    gaps = tuple(f"{name} {_one(found[key])}" for key, name in PARAMIKO_GAPS.items()
                 if found.get(key) and not (key == "gssapiauthentication" and _bool(_one(found[key])) is False))
    return ResolvedSSH(
        alias=address, hostname=hostname, port=port, user=user, identity_files=identity_files,
        use_agent=use_agent, policy=policy, known_hosts=known_hosts, connect_timeout=connect_timeout,
        keepalive=keepalive, proxy_jump=tuple(jumps), paramiko_gaps=gaps,
    )


def _one(value: object) -> str:
    """A config value as one string (Paramiko keeps some keys, IdentityFile for one, as lists)."""
    return " ".join(str(v) for v in value) if isinstance(value, list) else str(value)


def _without_jumps(r: ResolvedSSH) -> ResolvedSSH:
    return ResolvedSSH(
        alias=r.alias, hostname=r.hostname, port=r.port, user=r.user, identity_files=r.identity_files,
        use_agent=r.use_agent, policy=r.policy, known_hosts=r.known_hosts, connect_timeout=r.connect_timeout,
        keepalive=r.keepalive,
    )
