"""Config -> ClusterPlan: what runs where, with which ports, devices, environment and command. Pure.

Rules (DESIGN.md "Plan rules"):
- one `ps` task per host with role ps, on CPU (`CUDA_VISIBLE_DEVICES=""`);
- `worker` tasks: one per listed GPU (that GPU only), else `workers = N` CPU tasks (default 1);
- between-graph: a `chief` job when a host has that role (it takes that host's first GPU, the host's
  workers the remaining ones), else worker 0 acts as chief;
- in-graph: the single client runs as the `chief` task (CPU: it aggregates) on the chief host, or on
  the first worker host when no host has the chief role; workers only run a server;
- ports are allocated from `base_port`, unique across the whole cluster (TF binds every interface).

A plan that cannot run (orchestrator.plan.rules, ports past 65535, a bad `command` placeholder, a
`slowdown` for a task that does not exist) is a ConfigError whose key is a path such as `hosts[1].gpus`;
load_config turns that path into the line of hosts.toml.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import shlex
import string
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from orchestrator.config.schema import Config, HostConfig, SSHOptions, explicit_ssh, host_python, host_workdir
from orchestrator.config.toml_lines import format_key_path
from orchestrator.errors import ConfigError
from orchestrator.plan.rules import check_rules

JOB_ORDER = ("chief", "ps", "worker")  # TF_CONFIG lists jobs in this order; tasks are numbered per job
COMMAND_PLACEHOLDERS = ("job", "task", "ps_hosts", "worker_hosts", "chief_host", "python", "host")


@dataclass(frozen=True)
class TaskPlan:
    job: str  # "ps" | "worker" | "chief"
    index: int
    host: str  # host name from hosts.toml
    address: str  # the address other tasks use to reach it
    port: int
    gpu: int | None  # physical GPU index on the host, None = CPU
    device: str  # where this task's compute is placed, e.g. /job:worker/task:1/device:GPU:0
    cuda_visible_devices: str
    tf_config: dict[str, Any]
    command: list[str]  # argv run by the host's supervisor (cwd = the run's code/ dir)
    env: dict[str, str]
    is_chief: bool  # initialises, checkpoints, writes summaries
    in_cluster: bool = True  # False only for a task that runs no TF server

    @property
    def name(self) -> str:
        return f"{self.job}-{self.index}"

    @property
    def target(self) -> str:
        return f"{self.address}:{self.port}"


@dataclass(frozen=True)
class HostPlan:
    name: str
    address: str
    transport: str  # "ssh" | "local"
    python: str
    workdir: str
    ssh: SSHOptions
    roles: tuple[str, ...]
    tasks: tuple[str, ...]  # task names ("worker-0") on this host


@dataclass(frozen=True)
class ClusterPlan:
    cluster_name: str
    mode: str
    cluster_spec: dict[str, list[str]]
    hosts: tuple[HostPlan, ...]
    tasks: tuple[TaskPlan, ...]
    training: dict[str, Any]  # the [training] section as plain data, shipped to every host in run.json
    uses_user_command: bool
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def task(self, job: str, index: int) -> TaskPlan:
        for t in self.tasks:
            if t.job == job and t.index == index:
                return t
        raise KeyError(f"{job}:{index}")

    def tasks_on(self, host: str) -> list[TaskPlan]:
        return [t for t in self.tasks if t.host == host]

    def host(self, name: str) -> HostPlan:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    @property
    def chief(self) -> TaskPlan:
        return next(t for t in self.tasks if t.is_chief)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["hosts"] = [{**asdict(h), "ssh": h.ssh.model_dump(exclude_none=True)} for h in self.hosts]
        return data


def build_plan(
    config: Config, source: str = "hosts.toml", tf_addresses: Mapping[str, str] | None = None
) -> ClusterPlan:
    """Turn a validated Config into the ClusterPlan. Raises ConfigError for plans that cannot run.

    `tf_addresses` maps a host name to the address the other tasks dial (the HostName an ssh-config
    alias stands for, from `orchestrator.config_load.plan_config`); the plan stays pure, so whoever
    reads ~/.ssh/config passes it in. Hosts not in it are dialled at their `address` as written."""
    check_rules(config, source)
    dial = dict(tf_addresses or {})

    def _host_address(host: HostConfig) -> str:
        return dial.get(host.name, host.address)

    mode = config.cluster.mode
    hosts_with = {r: [h for h in config.hosts if r in h.roles] for r in ("ps", "worker", "chief")}

    # (job, host, gpu) in allocation order
    slots: dict[str, list[tuple[HostConfig, int | None]]] = {"chief": [], "ps": [], "worker": []}
    for h in hosts_with["ps"]:
        slots["ps"].append((h, None))
    chief_host = hosts_with["chief"][0] if hosts_with["chief"] else None
    for h in config.hosts:
        if "worker" not in h.roles and not (h is chief_host and mode == "between-graph"):
            continue
        gpus = list(h.gpus or [])
        if h is chief_host and mode == "between-graph":
            slots["chief"].append((h, gpus.pop(0) if gpus else None))
            if "worker" not in h.roles:
                continue
            if not gpus and h.gpus:
                continue  # its only GPU went to the chief
        if gpus:
            slots["worker"].extend((h, g) for g in gpus)
        else:
            slots["worker"].extend((h, None) for _ in range(h.workers or 1))
    if not slots["worker"]:
        # check_rules saw a worker host, so the chief took its only GPU
        i = next(i for i, h in enumerate(config.hosts) if "worker" in h.roles)
        raise ConfigError(
            source, f"hosts[{i}].gpus",
            f"no worker task left: the chief takes the first GPU of `{config.hosts[i].name}` and it has no "
            "other; list another GPU, or add a host with role `worker`",
        )
    if mode == "in-graph":
        client_host = chief_host or hosts_with["worker"][0]
        slots["chief"].append((client_host, None))

    if config.training.command is not None:
        check_command_template(config.training.command, source)

    task_count = sum(len(v) for v in slots.values())
    last_port = config.cluster.base_port + task_count - 1
    if last_port > 65535:
        raise ConfigError(
            source, "cluster.base_port",
            f"base_port {config.cluster.base_port} leaves no room for the plan's {task_count} task ports "
            f"(the last would be {last_port} > 65535); use base_port <= {65536 - task_count}",
        )

    ports: dict[tuple[str, int], int] = {}
    next_port = config.cluster.base_port
    for job in JOB_ORDER:
        for i in range(len(slots[job])):
            ports[(job, i)] = next_port
            next_port += 1

    cluster_spec = {
        job: [f"{_host_address(h)}:{ports[(job, i)]}" for i, (h, _) in enumerate(slots[job])]
        for job in JOB_ORDER
        if slots[job]
    }
    has_chief_job = bool(slots["chief"])

    tasks: list[TaskPlan] = []
    for job in JOB_ORDER:
        for i, (h, gpu) in enumerate(slots[job]):
            is_chief = (job == "chief") or (job == "worker" and i == 0 and not has_chief_job)
            kind = "GPU" if gpu is not None else "CPU"
            device = f"/job:{job}/task:{i}/device:{kind}:0"
            cuda = "" if gpu is None else str(gpu)
            tf_config = {"cluster": cluster_spec, "task": {"type": job, "index": i}}
            env = {
                "TF_CONFIG": json.dumps(tf_config, separators=(",", ":")),
                "CUDA_VISIBLE_DEVICES": cuda,
                "TFCLUSTER_JOB": job,
                "TFCLUSTER_TASK": str(i),
                "TFCLUSTER_HOST": h.name,
                "TFCLUSTER_MODE": mode,
                "PYTHONUNBUFFERED": "1",
                "TF_CPP_MIN_LOG_LEVEL": "1",
            }
            command = _task_command(config, h, job, i, cluster_spec)
            tasks.append(
                TaskPlan(
                    job=job, index=i, host=h.name, address=_host_address(h), port=ports[(job, i)],
                    gpu=gpu, device=device, cuda_visible_devices=cuda, tf_config=tf_config,
                    command=command, env=env, is_chief=is_chief,
                )
            )

    _check_slowdown(config, tasks, source)
    _check_backup_workers(config, tasks, source)

    host_plans = tuple(
        HostPlan(
            name=h.name, address=h.address, transport=h.transport, python=host_python(config, h),
            workdir=host_workdir(config, h), ssh=explicit_ssh(config, h), roles=tuple(h.roles),
            tasks=tuple(t.name for t in tasks if t.host == h.name),
        )
        for h in config.hosts
    )
    return ClusterPlan(
        cluster_name=config.cluster.name,
        mode=mode,
        cluster_spec=cluster_spec,
        hosts=host_plans,
        tasks=tuple(tasks),
        training=config.training.model_dump(),
        uses_user_command=config.training.command is not None,
        warnings=tuple(_warnings(config, dial)),
    )


def _braced(name: str) -> str:
    return "{" + name + "}"


def check_command_template(template: str, source: str) -> None:
    """The user's command may only use COMMAND_PLACEHOLDERS, each plainly (`{task}`, not `{task!r}`)."""
    try:
        fields = [(name, conversion) for _, name, _, conversion in string.Formatter().parse(template)]
    except ValueError as exc:  # unbalanced braces
        raise ConfigError(
            source, "training.command", f"{exc}: write {{{{ and }}}} for a literal brace in the command"
        ) from None
    for name, conversion in fields:
        if name is None:
            continue
        if name not in COMMAND_PLACEHOLDERS:
            close = difflib.get_close_matches(name, COMMAND_PLACEHOLDERS, n=1, cutoff=0.5)
            raise ConfigError(
                source, "training.command",
                f"unknown placeholder {{{name}}}; known: " + ", ".join(_braced(p) for p in COMMAND_PLACEHOLDERS),
                suggestion=_braced(close[0]) if close else None,
            )
        if conversion is not None:
            raise ConfigError(
                source, "training.command",
                f"placeholder {{{name}!{conversion}}}: conversions are not allowed, values are already shell-quoted",
                suggestion=_braced(name),
            )


def _task_command(config: Config, host: HostConfig, job: str, index: int, spec: dict[str, list[str]]) -> list[str]:
    python = host_python(config, host)
    user_command = config.training.command
    if user_command is None:
        return [python, "-m", "training.task"]
    values = {
        "job": job,
        "task": str(index),
        "ps_hosts": ",".join(spec.get("ps", [])),
        "worker_hosts": ",".join(spec.get("worker", [])),
        "chief_host": ",".join(spec.get("chief", [])),
        "python": python,
        "host": host.name,
    }
    # Every value is shell-quoted: the string runs under `sh -c` on the host.
    filled = user_command.format(**{k: shlex.quote(v) for k, v in values.items()})
    return ["/bin/sh", "-c", filled]


def _check_slowdown(config: Config, tasks: list[TaskPlan], source: str) -> None:
    names = [f"{t.job}:{t.index}" for t in tasks if t.job in ("worker", "chief")]
    for key in config.training.slowdown:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            raise ConfigError(
                source, format_key_path(("training", "slowdown", key)),
                f"the plan has no task {key} (its training tasks: {', '.join(names)})",
                suggestion=close[0] if close else None,
            )


def _check_backup_workers(config: Config, tasks: list[TaskPlan], source: str) -> None:
    training = config.training
    trainers = sum(1 for t in tasks if t.job == "worker" or (t.job == "chief" and config.cluster.mode == "between-graph"))
    if training.sync_replicas and training.backup_workers >= trainers:
        raise ConfigError(
            source, "training.backup_workers",
            f"backup_workers = {training.backup_workers} leaves no replica to aggregate: the plan has "
            f"{trainers} training tasks; use at most {trainers - 1}",
        )


def _warnings(config: Config, dial: Mapping[str, str]) -> list[str]:
    out = []
    for h in config.hosts:
        if h.gpus and "worker" not in h.roles and not ("chief" in h.roles and config.cluster.mode == "between-graph"):
            out.append(f"host {h.name}: `gpus` is ignored, only worker tasks (and a between-graph chief) use GPUs")
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
