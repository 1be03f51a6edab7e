"""Rules about the cluster as a whole that one key alone cannot break: duplicate hosts, missing jobs.

The schema (orchestrator.config.schema) checks each key; these checks need several of them. `build_plan`
runs them, so a Config built in code is held to the same rules as one loaded from a file, and
`load_config` adds the line of the offending key to the error.
"""

from __future__ import annotations

import difflib

from orchestrator.config.schema import Config, HostConfig, explicit_ssh
from orchestrator.errors import ConfigError
from training.models.sizes import BUILTIN_SHAPES

DEFAULT_SSH_PORT = 22


def ssh_endpoint(config: Config, host: HostConfig) -> tuple[str, int, str]:
    """The address, port and jump host hosts.toml gives for this host. (Aliases in ~/.ssh/config may
    still map two names onto one machine: load_config resolves them as OpenSSH would and checks again.)"""
    explicit = explicit_ssh(config, host)
    return host.address.strip().lower(), explicit.port or DEFAULT_SSH_PORT, (explicit.proxy_jump or "").lower()


def check_rules(config: Config, source: str) -> None:
    """Raise the first ConfigError, in hosts.toml order, for a cluster that cannot be planned."""
    seen_names: dict[str, int] = {}
    seen_endpoints: dict[tuple[str, int, str], int] = {}
    for i, host in enumerate(config.hosts):
        if host.name in seen_names:
            j = seen_names[host.name]
            raise ConfigError(
                source, f"hosts[{i}].name",
                f"host name `{host.name}` is already used by hosts[{j}]; every [[hosts]] entry needs its own name",
            )
        seen_names[host.name] = i
        if host.transport != "ssh":
            continue  # local hosts are this machine by definition: several may share it
        endpoint = ssh_endpoint(config, host)
        if endpoint in seen_endpoints:  # the same address behind different jump hosts may be two machines
            j = seen_endpoints[endpoint]
            raise ConfigError(
                source, f"hosts[{i}].address",
                f"host `{host.name}` has the same SSH address and port ({endpoint[0]}:{endpoint[1]}) as "
                f"`{config.hosts[j].name}` (hosts[{j}]); list each machine once and give it several tasks "
                "with `gpus` or `workers`",
            )
        seen_endpoints[endpoint] = i

    chiefs = [i for i, h in enumerate(config.hosts) if "chief" in h.roles]
    if len(chiefs) > 1:
        first, second = config.hosts[chiefs[0]].name, config.hosts[chiefs[1]].name
        raise ConfigError(
            source, f"hosts[{chiefs[1]}].roles",
            f"only one host may have role `chief`, but `{first}` and `{second}` both do",
        )
    if not any("worker" in h.roles for h in config.hosts):
        raise ConfigError(
            source, "hosts",
            'no worker: give at least one host the role `worker` (roles = ["worker"])',
        )
    needs_ps = config.cluster.mode == "between-graph" or config.training.command is None
    if needs_ps and not any("ps" in h.roles for h in config.hosts):
        key = "cluster.mode" if "mode" in config.cluster.model_fields_set else "hosts"
        if config.cluster.mode == "between-graph":
            raise ConfigError(
                source, key,
                'between-graph mode needs a parameter server: give a host the role `ps` (roles = ["ps"])',
            )
        # The built-in in-graph client keeps the variables on PS tasks too (training/in_graph.py).
        raise ConfigError(
            source, key, 'in-graph mode keeps the variables on a parameter server: give a host the role `ps`',
        )

    training = config.training
    if training.command is None and training.model not in BUILTIN_SHAPES and ":" not in training.model:
        close = difflib.get_close_matches(training.model, list(BUILTIN_SHAPES), n=1)
        raise ConfigError(
            source, "training.model",
            f"unknown model `{training.model}`: use a built-in one ({', '.join(BUILTIN_SHAPES)}) "
            'or your own as "package.module:build"',
            suggestion=close[0] if close else None,
        )
