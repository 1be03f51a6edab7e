"""Config -> ClusterPlan: what runs where, with which ports, devices, environment and command. Pure.

Rules (DESIGN.md "Plan rules"):
- one `ps` task per host with role ps, on CPU (`CUDA_VISIBLE_DEVICES=""`);
- `worker` tasks: one per listed GPU (that GPU only), else `workers = N` CPU tasks (default 1);
- between-graph: a `chief` job when a host has that role (it takes that host's first GPU, the host's
  workers the remaining ones), else worker 0 acts as chief;
- in-graph: the single client runs as the `chief` task (CPU: it aggregates) on the chief host, or on
  the first worker host when no host has the chief role; workers only run a server;
- ports: orchestrator.plan.ports. Every other rule a plan must hold: orchestrator.plan.rules.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping

from orchestrator.config.schema import Config, HostConfig, explicit_ssh, host_python, host_workdir
from orchestrator.errors import ConfigError
from orchestrator.plan.model import JOB_ORDER, ClusterPlan, HostPlan, Job, TaskPlan
from orchestrator.plan.ports import allocate_ports
from orchestrator.plan.rules import (
    check_backup_workers,
    check_command_template,
    check_model_arguments,
    check_rules,
    check_slowdown,
    plan_warnings,
)

Slots = dict[Job, list[tuple[HostConfig, "int | None"]]]  # job -> (host, gpu) in task-index order


def build_plan(
    config: Config, source: str = "hosts.toml", tf_addresses: Mapping[str, str] | None = None
) -> ClusterPlan:
    """Turn a validated Config into the ClusterPlan. Raises ConfigError for plans that cannot run.

    `tf_addresses` maps a host name to the address the other tasks dial (the HostName an ssh-config
    alias stands for, resolved by `orchestrator.plan.from_file`); the plan stays pure, so whoever
    reads ~/.ssh/config passes it in. Hosts not in it are dialled at their `address` as written."""
    check_rules(config, source)
    check_model_arguments(config, source)
    dial = dict(tf_addresses or {})

    def _host_address(host: HostConfig) -> str:
        return dial.get(host.name, host.address)

    mode = config.cluster.mode
    slots = _slots(config, source)

    if config.training.command is not None:
        check_command_template(config.training.command, source)

    ports = allocate_ports({job: len(v) for job, v in slots.items()}, JOB_ORDER, config.cluster.base_port, source)

    cluster_spec: dict[str, list[str]] = {
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

    check_slowdown(config, tasks, source)
    check_backup_workers(config, tasks, source)

    host_plans = tuple(
        HostPlan(
            name=h.name, address=h.address, transport=h.transport, python=host_python(config, h),
            workdir=host_workdir(config, h), ssh=explicit_ssh(config, h), roles=tuple(h.roles),
            tasks=tuple(t.name for t in tasks if t.host == h.name), login_shell=config.remote.login_shell,
        )
        for h in config.hosts
    )
    return ClusterPlan(
        cluster_name=config.cluster.name,
        mode=mode,
        cluster_spec=cluster_spec,
        hosts=host_plans,
        tasks=tuple(tasks),
        training=config.training,
        uses_user_command=config.training.command is not None,
        warnings=tuple(plan_warnings(config, dial)),
    )


def _slots(config: Config, source: str) -> Slots:
    """Which host (and GPU) each task of each job runs on, in task-index order."""
    mode = config.cluster.mode
    hosts_with = {r: [h for h in config.hosts if r in h.roles] for r in ("ps", "worker", "chief")}

    # (job, host, gpu) in allocation order
    slots: Slots = {"chief": [], "ps": [], "worker": []}
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
    return slots


def _task_command(config: Config, host: HostConfig, job: Job, index: int, spec: dict[str, list[str]]) -> list[str]:
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
