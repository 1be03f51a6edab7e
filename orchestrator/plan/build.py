"""A ValidConfig -> the ClusterPlan: what runs where, with which ports, devices, environment and command.
Pure, and without a check of its own: orchestrator.config.validate refused whatever cannot run, and
orchestrator.config.rules decided each job's tasks and their seats (DESIGN.md "Plan rules").

- each task's environment: the plan's variables, then `[training] env`, then the host's `env`
  (TF_CPP_MIN_LOG_LEVEL defaults to 1 unless one of them sets it); the user's `command` gets the
  placeholders it uses as TFCLUSTER_ARG_* variables (orchestrator.config.command);
- ports: one per task, then one per host for its supervisor's peer channel, consecutive from
  `[cluster] base_port` and unique across the whole cluster, not per host: TensorFlow's gRPC server
  listens on every interface of its machine (`*:port`, whatever address the cluster spec names), loopback
  "machines" in tests share one network stack, and on real machines it keeps `plan` output unambiguous.

`build_plan` places the tasks of `[[hosts]]`; `assemble_plan` turns any placement (machines, and each
job's slots on them) into the ClusterPlan, so a Slurm job's layout (orchestrator.plan.slurm) becomes the
same HostPlan and TaskPlan objects.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.config.kinds import Transport
from orchestrator.config.schema import SSHOptions
from orchestrator.config.validate import ValidConfig
from orchestrator.plan.model import JOB_ORDER, ClusterPlan, HostPlan, Job, TaskPlan
from training.run.layout import host_module


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


def build_plan(valid: ValidConfig) -> ClusterPlan:
    """The ClusterPlan of a validated [[hosts]] Config. Hosts are dialled at the HostName their ssh-config
    alias stands for (`valid.dial`), else at their `address` as written."""
    config = valid.config
    machines = [
        Machine(name=h.name, address=h.address, dial_address=valid.dial.get(h.name, h.address),
                transport=h.transport, python=h.python or config.remote.python,
                workdir=h.workdir or config.remote.workdir, ssh=valid.ssh[h.name], roles=tuple(h.roles),
                env=h.env or {})
        for h in config.hosts
    ]
    seats = valid.tasks.seats or {}
    slots: Slots = {job: [Slot(machines[host], gpus) for host, gpus in seats.get(job, ())] for job in JOB_ORDER}
    return assemble_plan(valid, machines, slots, valid.warnings)


def assemble_plan(valid: ValidConfig, machines: Sequence[Machine], slots: Slots,
                  warnings: Sequence[str] = ()) -> ClusterPlan:
    """The ClusterPlan of tasks placed in `slots` on `machines` (one HostPlan each, in this order)."""
    config = valid.config
    mode = config.cluster.mode
    shell_text = valid.tasks.shell_text
    numbered = itertools.count(config.cluster.base_port)
    counts: dict[str, int] = {**{job: len(v) for job, v in slots.items()}, "control": len(machines)}
    ports = {(job, i): next(numbered) for job in (*JOB_ORDER, "control") for i in range(counts[job])}

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
                values = _placeholder_values(m, job, i, cluster_spec)
                env.update({var: values[name] for name, var in valid.tasks.placeholder_vars.items()})
            tasks.append(
                TaskPlan(
                    job=job, index=i, host=m.name, address=m.dial_address, port=ports[(job, i)],
                    gpus=slot.gpus, device=device, cuda_visible_devices=cuda,
                    tf_config=tf_config, command=command, env=env, is_chief=is_chief,
                )
            )

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


def _placeholder_values(machine: Machine, job: Job, index: int, spec: dict[str, list[str]]) -> dict[str, str]:
    """The values of the user command's placeholders for one task (orchestrator.config.command)."""
    return {
        "job": job,
        "task": str(index),
        "ps_hosts": ",".join(spec.get("ps", [])),
        "worker_hosts": ",".join(spec.get("worker", [])),
        "chief_host": ",".join(spec.get("chief", [])),
        "python": machine.python,
        "host": machine.name,
    }
