"""The one entry from hosts.toml to a plan: `plan_file(path, mode=None)` (and, for a `[slurm]` job,
`slurm_plan_file`; `any_plan_file` for `tfcluster plan`, which shows either).

It reads and validates the file (orchestrator.config.load), applies a `--mode` override, resolves each
SSH host as OpenSSH would (hosts.toml > ~/.ssh/config > defaults: the cluster spec gets the HostName
an alias stands for, since the tasks dial each other directly), builds the plan once
(orchestrator.plan.build), and checks that no two hosts are one machine once aliases are resolved.
Every ConfigError raised on the way gets the file and the line of its key here, in one place.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.config.load import read_config, with_line
from orchestrator.config.modes import Mode
from orchestrator.config.schema import Config, explicit_ssh
from orchestrator.config.slurm_schema import option_name
from orchestrator.config.ssh_config import ResolvedSSH, load_ssh_config, resolve_ssh
from orchestrator.errors import ConfigError
from orchestrator.plan.build import build_plan
from orchestrator.plan.model import ClusterPlan
from orchestrator.plan.slurm import SlurmNode, SlurmPlan, plan_slurm

if TYPE_CHECKING:
    import paramiko

Resolved = dict[str, ResolvedSSH]  # host name -> effective SSH settings (SSH hosts only)


def plan_file(path: str | Path, mode: Mode | None = None) -> ClusterPlan:
    """The plan for hosts.toml at `path` (optionally in another mode). Raises ConfigError with a line."""
    source = str(path)
    config, text = read_config(path)
    try:
        return plan_config(with_mode(config, mode), source)
    except ConfigError as exc:
        raise with_line(exc, text) from None


def slurm_plan_file(path: str | Path, nodes: list[SlurmNode] | None = None) -> SlurmPlan:
    """The plan of the [slurm] job of hosts.toml at `path` (orchestrator.plan.slurm), in node indexes or on
    the allocation's `nodes`. Raises ConfigError with a line (also when the file has no [slurm])."""
    source = str(path)
    config, text = read_config(path)
    try:
        return plan_slurm(config, source, nodes)
    except ConfigError as exc:
        raise with_line(exc, text) from None


def any_plan_file(path: str | Path, mode: Mode | None = None) -> ClusterPlan | SlurmPlan:
    """The plan of hosts.toml's [[hosts]], or of its [slurm] job (optionally in another mode)."""
    source = str(path)
    config, text = read_config(path)
    config = with_mode(config, mode)
    try:
        if config.slurm is None:
            return plan_config(config, source)
        check_start(config, source)
        return plan_slurm(config, source)
    except ConfigError as exc:
        raise with_line(exc, text) from None


def cluster_plan(config: Config, source: str = "hosts.toml") -> ClusterPlan:
    """The plan of an already validated Config, of its [[hosts]] or of its [slurm] job (in node indexes)."""
    return plan_slurm(config, source).plan if config.slurm is not None else plan_config(config, source)


def check_start(config: Config, source: str) -> None:
    """What `start` of a [slurm] job needs beyond its layout (so `plan` refuses it too): no `--requeue`
    (start submits with --no-requeue: a job Slurm requeued would start over behind its supervisors' backs),
    and `login` resolved as OpenSSH would (an unusable ssh config or identity is an error now)."""
    if config.slurm is None:
        return
    if any(option_name(word) == "--requeue" for word in config.slurm.sbatch_args):
        raise ConfigError(source, "slurm.sbatch_args", "--requeue: `tfcluster start` submits with --no-requeue (a "
                          "job Slurm requeued would start over behind its supervisors, which restart its tasks "
                          "themselves); `tfcluster export slurm` keeps it")
    login = config.slurm.login
    if login:
        try:
            resolve_ssh(login, config.ssh)
        except ConfigError as exc:
            raise ConfigError(source, "slurm.login", exc.message, suggestion=exc.suggestion) from None


def plan_config(config: Config, source: str = "hosts.toml") -> ClusterPlan:
    """The plan of an already validated Config (errors carry key paths, not lines)."""
    resolved = resolve_hosts_ssh(config, source)
    plan = build_plan(config, source, {name: r.hostname for name, r in resolved.items()})
    check_resolved_endpoints(config, resolved, source)
    return dataclasses.replace(plan, warnings=(*plan.warnings, *alias_warnings(resolved)))


def with_mode(config: Config, mode: Mode | None) -> Config:
    if mode is None or mode == config.cluster.mode:
        return config
    return config.model_copy(update={"cluster": config.cluster.model_copy(update={"mode": mode})})


def resolve_hosts_ssh(config: Config, source: str = "hosts.toml") -> Resolved:
    """Each SSH host's effective settings, by host name; each ssh config file is parsed once."""
    parsed: dict[str | None, paramiko.SSHConfig | None] = {}
    out: Resolved = {}
    for i, host in enumerate(config.hosts):
        if host.transport != "ssh":
            continue
        explicit = explicit_ssh(config, host)
        try:
            if explicit.config_file not in parsed:
                parsed[explicit.config_file] = load_ssh_config(explicit.config_file)
            out[host.name] = resolve_ssh(
                host.address, explicit, ssh_config=parsed[explicit.config_file], load_config_file=False
            )
        except ConfigError as exc:  # ssh_config names no file; this error is about ours
            key = exc.key if exc.key and exc.source == "hosts.toml" else f"hosts[{i}].address"
            raise ConfigError(source, key, exc.message, suggestion=exc.suggestion) from None
    return out


def check_resolved_endpoints(config: Config, resolved: Resolved, source: str) -> None:
    """Two [[hosts]] entries that are one machine once ~/.ssh/config aliases are resolved, as OpenSSH
    would resolve them (HostName, Port, ProxyJump): the plan would start twice the tasks on it."""
    seen: dict[tuple[str, int, tuple[tuple[str, int], ...]], int] = {}
    for i, host in enumerate(config.hosts):
        r = resolved.get(host.name)
        if r is None:
            continue
        jumps = tuple((j.hostname.lower(), j.port) for j in r.proxy_jump)
        endpoint = (r.hostname.lower(), r.port, jumps)
        if endpoint in seen:
            j = seen[endpoint]
            other = config.hosts[j]
            raise ConfigError(
                source, f"hosts[{i}].address",
                f"host `{host.name}` (`{host.address}`) and `{other.name}` (`{other.address}`, hosts[{j}]) are "
                f"the same machine once the ssh config is applied ({r.hostname}:{r.port}); list "
                "each machine once and give it several tasks with `gpus` or `workers`",
            )
        seen[endpoint] = i


def alias_warnings(resolved: Resolved) -> list[str]:
    """Hosts whose address is an ssh-config alias: say which HostName the TF tasks will dial instead,
    since that name must also be reachable from every other machine of the cluster."""
    return [
        f"host {name}: `{r.alias}` is an ssh config alias for {r.hostname}; the cluster "
        f"spec uses {r.hostname}, which every other machine must be able to reach"
        for name, r in resolved.items() if r.hostname.lower() != r.alias.lower()
    ]
