"""Config -> ClusterPlan: what runs where, with which ports, devices, environment and command. Pure.

Rules (DESIGN.md "Plan rules"):
- one `ps` task per host with role ps, on CPU (`CUDA_VISIBLE_DEVICES=""`);
- `worker` tasks: one per listed GPU (that GPU only), else `workers = N` CPU tasks (default 1);
- between-graph: a `chief` job when a host has that role (it takes that host's first GPU, the host's
  workers the remaining ones), else worker 0 acts as chief;
- in-graph: the single client runs as the `chief` task (CPU: it aggregates) on the chief host, or on
  the first worker host when no host has the chief role; workers only run a server;
- multi-worker-mirrored: as between-graph, without ps (a `chief` task when a host has that role, else
  worker 0 is chief: it checkpoints);
- parameter-server-strategy: ps and workers run standard servers; the coordinator is the `chief` task
  (CPU) on the chief host, or on the first worker host when no host has the chief role;
- every task's environment: the plan's variables, then `[training] env`, then the host's `env`
  (TF_CPP_MIN_LOG_LEVEL defaults to 1 unless one of them sets it); the user's `command` gets its
  placeholders as TFCLUSTER_ARG_* variables (orchestrator.plan.command);
- ports: orchestrator.plan.ports. Every other rule a plan must hold: orchestrator.plan.rules.

`build_plan` places the tasks of `[[hosts]]`; `assemble_plan` turns any placement (machines, and each
job's slots on them) into the ClusterPlan, so a Slurm job's layout (orchestrator.plan.slurm) becomes the
same HostPlan and TaskPlan objects.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.config.schema import Config, HostConfig, SSHOptions, explicit_ssh, host_python, host_workdir
from orchestrator.errors import ConfigError
from orchestrator.plan.command import command_env, fill_command
from orchestrator.plan.model import JOB_ORDER, ClusterPlan, HostPlan, Job, TaskPlan, Transport
from orchestrator.plan.ports import allocate_ports
from orchestrator.plan.rules import (
    check_backup_workers,
    check_model_arguments,
    check_rules,
    check_slowdown,
    plan_warnings,
)
from training.run.layout import host_module

# Modes whose chief job is a separate client/coordinator on CPU; in the others the chief trains.
CLIENT_CHIEF_MODES = ("in-graph", "parameter-server-strategy")
TRAINING_CHIEF_MODES = ("between-graph", "multi-worker-mirrored")
SLURM_NOT_YET = ("`check` does not probe a [slurm] job's nodes (they are known only once the job runs): `tfcluster "
                 "plan` shows its layout, `tfcluster start` runs it")


@dataclass(frozen=True)
class Machine:
    """One machine as the plan sees it: a [[hosts]] entry, or a node of a Slurm allocation."""

    name: str
    address: str  # where tfcluster reaches it
    dial_address: str  # where the other tasks reach it
    transport: Transport
    python: str
    workdir: str
    ssh: SSHOptions
    roles: tuple[str, ...]
    env: Mapping[str, str]  # for its tasks, on top of [training] env


@dataclass(frozen=True)
class Slot:
    """Where one task runs: its machine and the GPUs it sees (CUDA_VISIBLE_DEVICES; none = the CPU)."""

    machine: Machine
    gpus: tuple[int, ...] = ()


Slots = dict[Job, list[Slot]]  # job -> its tasks' slots in task-index order


def build_plan(
    config: Config, source: str = "hosts.toml", tf_addresses: Mapping[str, str] | None = None
) -> ClusterPlan:
    """Turn a validated Config into the ClusterPlan. Raises ConfigError for plans that cannot run.

    `tf_addresses` maps a host name to the address the other tasks dial (the HostName an ssh-config
    alias stands for, resolved by `orchestrator.plan.from_file`); the plan stays pure, so whoever
    reads ~/.ssh/config passes it in. Hosts not in it are dialled at their `address` as written."""
    if config.slurm is not None:
        raise ConfigError(source, "slurm", SLURM_NOT_YET)
    check_rules(config, source)
    check_model_arguments(config, source)
    dial = dict(tf_addresses or {})
    machines = [
        Machine(name=h.name, address=h.address, dial_address=dial.get(h.name, h.address), transport=h.transport,
                python=host_python(config, h), workdir=host_workdir(config, h), ssh=explicit_ssh(config, h),
                roles=tuple(h.roles), env=h.env or {})
        for h in config.hosts
    ]
    slots = _slots(config, {m.name: m for m in machines}, source)
    return assemble_plan(config, machines, slots, source, plan_warnings(config, dial))


def assemble_plan(config: Config, machines: Sequence[Machine], slots: Slots, source: str,
                  warnings: Sequence[str] = ()) -> ClusterPlan:
    """The ClusterPlan of tasks placed in `slots` on `machines` (one HostPlan each, in this order)."""
    mode = config.cluster.mode
    shell_text = None if config.training.command is None else fill_command(config.training.command, source)

    # One port per task, then one per host for its supervisor's peer channel.
    counts: dict[str, int] = {**{job: len(v) for job, v in slots.items()}, "control": len(machines)}
    ports = allocate_ports(counts, (*JOB_ORDER, "control"), config.cluster.base_port, source)

    cluster_spec: dict[str, list[str]] = {
        job: [f"{slot.machine.dial_address}:{ports[(job, i)]}" for i, slot in enumerate(slots[job])]
        for job in JOB_ORDER
        if slots[job]
    }
    has_chief_job = bool(slots["chief"])

    tasks: list[TaskPlan] = []
    for job in JOB_ORDER:
        for i, slot in enumerate(slots[job]):
            m = slot.machine
            is_chief = (job == "chief") or (job == "worker" and i == 0 and not has_chief_job)
            kind = "GPU" if slot.gpus else "CPU"
            device = f"/job:{job}/task:{i}/device:{kind}:0"
            cuda = ",".join(str(g) for g in slot.gpus)
            tf_config = {"cluster": cluster_spec, "task": {"type": job, "index": i}}
            env = {
                "TF_CPP_MIN_LOG_LEVEL": "1",  # TF's C++ INFO lines off, unless the user's env says otherwise
                **config.training.env,
                **m.env,
                "TF_CONFIG": json.dumps(tf_config, separators=(",", ":")),
                "CUDA_VISIBLE_DEVICES": cuda,
                "TFCLUSTER_JOB": job,
                "TFCLUSTER_TASK": str(i),
                "TFCLUSTER_HOST": m.name,
                "TFCLUSTER_MODE": mode,
                "PYTHONUNBUFFERED": "1",
            }
            if shell_text is None:
                command = [m.python, "-m", host_module("task")]
            else:
                command = ["/bin/sh", "-c", shell_text]
                # Only what the command refers to: {ps_hosts} in every task's env makes the plan O(hosts^2).
                values = _placeholder_values(m, job, i, cluster_spec)
                env.update({k: v for k, v in command_env(values).items() if k in shell_text})
            tasks.append(
                TaskPlan(
                    job=job, index=i, host=m.name, address=m.dial_address, port=ports[(job, i)],
                    gpu=slot.gpus[0] if slot.gpus else None, device=device, cuda_visible_devices=cuda,
                    tf_config=tf_config, command=command, env=env, is_chief=is_chief,
                )
            )

    check_slowdown(config, tasks, source)
    check_backup_workers(config, tasks, source)

    host_plans = tuple(
        HostPlan(
            name=m.name, address=m.address, transport=m.transport, python=m.python, workdir=m.workdir, ssh=m.ssh,
            roles=m.roles, tasks=tuple(t.name for t in tasks if t.host == m.name),
            dial_address=m.dial_address, control_port=ports[("control", i)],
            login_shell=config.remote.login_shell,
        )
        for i, m in enumerate(machines)
    )
    return ClusterPlan(
        cluster_name=config.cluster.name,
        mode=mode,
        cluster_spec=cluster_spec,
        hosts=host_plans,
        tasks=tuple(tasks),
        training=config.training,
        uses_user_command=config.training.command is not None,
        warnings=tuple(warnings),
    )


def _slots(config: Config, machines: Mapping[str, Machine], source: str) -> Slots:
    """Which host (and GPU) each task of each job runs on, in task-index order."""
    mode = config.cluster.mode
    hosts_with = {r: [h for h in config.hosts if r in h.roles] for r in ("ps", "worker", "chief")}

    def slot(h: HostConfig, gpu: int | None = None) -> Slot:
        return Slot(machines[h.name], () if gpu is None else (gpu,))

    slots: Slots = {"chief": [], "ps": [], "worker": []}
    for h in hosts_with["ps"]:
        slots["ps"].append(slot(h))
    chief_host = hosts_with["chief"][0] if hosts_with["chief"] else None
    for h in config.hosts:
        trains_as_chief = h is chief_host and mode in TRAINING_CHIEF_MODES
        if "worker" not in h.roles and not trains_as_chief:
            continue
        gpus = list(h.gpus or [])
        if trains_as_chief:
            slots["chief"].append(slot(h, gpus.pop(0) if gpus else None))
            if "worker" not in h.roles:
                continue
            if not gpus and h.gpus:
                continue  # its only GPU went to the chief
        if gpus:
            slots["worker"].extend(slot(h, g) for g in gpus)
        else:
            slots["worker"].extend(slot(h) for _ in range(h.workers or 1))
    if not slots["worker"]:
        # check_rules saw a worker host, so the chief took its only GPU
        i = next(i for i, h in enumerate(config.hosts) if "worker" in h.roles)
        raise ConfigError(
            source, f"hosts[{i}].gpus",
            f"no worker task left: the chief takes the first GPU of `{config.hosts[i].name}` and it has no "
            "other; list another GPU, or add a host with role `worker`",
        )
    if mode in CLIENT_CHIEF_MODES:
        client_host = chief_host or hosts_with["worker"][0]
        slots["chief"].append(slot(client_host))
    return slots


def _placeholder_values(machine: Machine, job: Job, index: int, spec: dict[str, list[str]]) -> dict[str, str]:
    """The values of the user command's placeholders for one task (orchestrator.plan.command)."""
    return {
        "job": job,
        "task": str(index),
        "ps_hosts": ",".join(spec.get("ps", [])),
        "worker_hosts": ",".join(spec.get("worker", [])),
        "chief_host": ",".join(spec.get("chief", [])),
        "python": machine.python,
        "host": machine.name,
    }
