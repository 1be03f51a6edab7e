"""Every rule a plan must satisfy, in one place: the cluster as a whole (duplicate hosts, missing
jobs), the model's arguments, the user's command template, `slowdown` and `backup_workers` against the
planned tasks, and the warnings a plan carries (public addresses, unverified host keys, ignored keys).

The schema (orchestrator.config.schema) checks each key alone; these checks need several of them.
`build_plan` runs them, so a Config built in code is held to the same rules as one loaded from a file.
Each failure is a ConfigError whose key is a path such as `hosts[1].gpus`; `plan_file` turns that path
into the line of hosts.toml.
"""

from __future__ import annotations

import difflib
import ipaddress
from collections.abc import Mapping, Sequence

from orchestrator.config.schema import Config, HostConfig, explicit_ssh
from orchestrator.config.toml_lines import format_key_path
from orchestrator.errors import ConfigError
from orchestrator.plan.model import TaskPlan
from training.models.sizes import BUILTIN_SHAPES, ModelArgError, check_model_args

DEFAULT_SSH_PORT = 22


def ssh_endpoint(config: Config, host: HostConfig) -> tuple[str, int, str]:
    """The address, port and jump host hosts.toml gives for this host. (Aliases in ~/.ssh/config may
    still map two names onto one machine: plan_file resolves them as OpenSSH would and checks again.)"""
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
    mode = config.cluster.mode
    ps_hosts = [i for i, h in enumerate(config.hosts) if "ps" in h.roles]
    mode_key = "cluster.mode" if "mode" in config.cluster.model_fields_set else "hosts"
    if mode == "multi-worker-mirrored" and ps_hosts:
        i = ps_hosts[0]
        raise ConfigError(
            source, f"hosts[{i}].roles",
            f"multi-worker-mirrored mode has no parameter server (the workers all-reduce their gradients): "
            f"remove role `ps` from `{config.hosts[i].name}`, or use mode \"parameter-server-strategy\"",
        )
    if needs_ps(config) and not ps_hosts:
        raise ConfigError(source, mode_key, f'{why_ps_needed(config)}: give a host the role `ps` (roles = ["ps"])')
    check_model_name(config, source)


def needs_ps(config: Config) -> bool:
    """Whether the mode needs a parameter server: the built-in in-graph client keeps its variables on PS
    tasks too (training/graph/in_graph.py)."""
    mode = config.cluster.mode
    return mode in ("between-graph", "parameter-server-strategy") or (
        mode == "in-graph" and config.training.command is None)


def why_ps_needed(config: Config) -> str:
    return {"between-graph": "between-graph mode needs a parameter server",
            "parameter-server-strategy": "parameter-server-strategy keeps the variables on parameter servers",
            "in-graph": "in-graph mode keeps the variables on a parameter server",
            }.get(config.cluster.mode, "")


def check_model_name(config: Config, source: str) -> None:
    """`[training] model`: a built-in model, or the user's own as package.module:build."""
    training = config.training
    if training.command is None and training.model not in BUILTIN_SHAPES and ":" not in training.model:
        close = difflib.get_close_matches(training.model, list(BUILTIN_SHAPES), n=1)
        raise ConfigError(
            source, "training.model",
            f"unknown model `{training.model}`: use a built-in one ({', '.join(BUILTIN_SHAPES)}) "
            'or your own as "package.module:build"',
            suggestion=close[0] if close else None,
        )


def check_model_arguments(config: Config, source: str) -> None:
    """`[training] model_args` for a built-in model (or the sizes a user's model borrows from mlp)."""
    training = config.training
    if training.command is not None:
        return  # the user's own program reads its own arguments
    try:
        check_model_args(training.model, training.model_args)
    except ModelArgError as exc:
        key = ("training", "model_args", exc.key) if exc.key else ("training", "model_args")
        raise ConfigError(source, format_key_path(key), exc.message, suggestion=exc.suggestion) from None


def check_slowdown(config: Config, tasks: Sequence[TaskPlan], source: str) -> None:
    names = [f"{t.job}:{t.index}" for t in tasks if t.job in ("worker", "chief")]
    for key in config.training.slowdown:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            raise ConfigError(
                source, format_key_path(("training", "slowdown", key)),
                f"the plan has no task {key} (its training tasks: {', '.join(names)})",
                suggestion=close[0] if close else None,
            )


def check_backup_workers(config: Config, tasks: Sequence[TaskPlan], source: str) -> None:
    training = config.training
    trainers = sum(1 for t in tasks if t.job == "worker" or (t.job == "chief" and config.cluster.mode == "between-graph"))
    if training.sync_replicas and config.cluster.mode != "between-graph":
        raise ConfigError(source, "training.sync_replicas",
                          f"sync_replicas is for between-graph mode; {config.cluster.mode} is "
                          + ("synchronous already" if config.cluster.mode != "parameter-server-strategy"
                             else "asynchronous by design (use multi-worker-mirrored for synchronous steps)"))
    if training.sync_replicas and training.backup_workers >= trainers:
        raise ConfigError(
            source, "training.backup_workers",
            f"backup_workers = {training.backup_workers} leaves no replica to aggregate: the plan has "
            f"{trainers} training tasks; use at most {trainers - 1}",
        )


def plan_warnings(config: Config, dial: Mapping[str, str]) -> list[str]:
    out = []
    for h in config.hosts:
        trains_as_chief = "chief" in h.roles and config.cluster.mode in ("between-graph", "multi-worker-mirrored")
        if h.gpus and "worker" not in h.roles and not trains_as_chief:
            out.append(f"host {h.name}: `gpus` is ignored, only worker tasks (and a training chief) use GPUs")
        if h.workers is not None and "worker" not in h.roles:
            out.append(f"host {h.name}: `workers` is ignored, the host has no `worker` role")
        if explicit_ssh(config, h).strict_host_key_checking == "no" and h.transport == "ssh":
            out.append(
                f'host {h.name}: strict_host_key_checking = "no" accepts any host key, so a '
                "man-in-the-middle would go unnoticed; use \"accept-new\" once, then \"yes\""
            )
        address = dial.get(h.name, h.address)  # what the tasks dial: an alias's HostName, when known
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            continue  # a DNS name: not resolved here, the plan stays pure
        if ip.is_global and not config.cluster.allow_public:
            out.append(
                f"host {h.name}: {address} is a public address and TensorFlow's gRPC server listens "
                "unauthenticated on every interface; firewall the task ports or set cluster.allow_public"
            )
    return out
