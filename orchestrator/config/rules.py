"""Every rule a hosts.toml holds beyond each key alone, in one place: the cluster as a whole (host names,
missing jobs, a [slurm] job's counts against its nodes and GPUs), the model and its arguments, the user's
command template, room for the ports, `slowdown` and `backup_workers` against the tasks there will be.

Pure. `check_rules` raises the first ConfigError, in hosts.toml's order, or returns what it worked out on
the way (`Tasks`: each job's tasks, where each sits on [[hosts]], the command's shell text), which the plan
is built from without a check of its own. The schema (orchestrator.config.schema) checks each key alone;
orchestrator.config.ssh_config finds two entries that are one machine. Each error's key is a path such as
`hosts[1].gpus`; orchestrator.config.load gives it its line.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.config.command import fill_command, placeholder_vars
from orchestrator.config.modes import CLIENT_CHIEF_MODES, TRAINING_CHIEF_MODES, Mode
from orchestrator.config.schema import Config, HostConfig, Role
from orchestrator.config.slurm_schema import SlurmSection
from orchestrator.config.toml_lines import format_key_path
from orchestrator.errors import ConfigError
from training.models.sizes import BUILTIN_SHAPES, ModelArgError, check_model_args

MAX_PORT = 65535
Seat = tuple[int, tuple[int, ...]]  # where a task runs: its host's index in [[hosts]], and its GPUs (none: the CPU)


@dataclass(frozen=True)
class Tasks:
    """The tasks the rules saw there will be."""

    jobs: Mapping[Role, int]  # how many tasks each job has
    # [[hosts]]: each job's seats in task-index order. None for [slurm]: orchestrator.plan.slurm seats
    # the tasks on the allocation's nodes as SlurmClusterResolver does.
    seats: Mapping[Role, tuple[Seat, ...]] | None
    shell_text: str | None  # the user's `command`, every placeholder an inert reference (config.command)
    placeholder_vars: Mapping[str, str]  # each placeholder the command uses -> the variable its reference reads


def check_rules(config: Config, source: str) -> Tasks:
    """The tasks of a cluster that can be planned; else the first ConfigError, in hosts.toml's order."""
    seats = None
    if config.slurm is None:
        _check_hosts(config, source)
        seats = _seats(config, source)
        jobs = {job: len(s) for job, s in seats.items()}
    else:
        jobs = _slurm_jobs(config, config.slurm, source)
    _check_model(config, source)
    command = config.training.command
    shell_text = None if command is None else fill_command(command, source)
    variables = placeholder_vars(command or "")
    _check_port_room(config, jobs, source)
    _check_slowdown(config, jobs, source)
    _check_backup_workers(config, jobs, source)
    return Tasks(jobs, seats, shell_text, variables)


def _check_hosts(config: Config, source: str) -> None:
    seen_names: dict[str, int] = {}
    for i, host in enumerate(config.hosts):
        if host.name in seen_names:
            j = seen_names[host.name]
            raise ConfigError(
                source, f"hosts[{i}].name",
                f"host name `{host.name}` is already used by hosts[{j}]; every [[hosts]] entry needs its own name",
            )
        seen_names[host.name] = i
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
    for i, host in enumerate(config.hosts):
        _check_gpus_per_task(config, i, host, source)


def gpus_per_task(host: HostConfig, mode: Mode) -> int:
    """How many of a host's listed GPUs each of its GPU tasks sees: its `gpus_per_task`, else all of them in
    multi-worker-mirrored mode (TensorFlow's layout: one task per machine, a replica per GPU), else one."""
    if host.gpus_per_task is not None:
        return host.gpus_per_task
    return (len(host.gpus or ()) or 1) if mode == "multi-worker-mirrored" else 1


def _check_gpus_per_task(config: Config, i: int, host: HostConfig, source: str) -> None:
    """An explicit `gpus_per_task`: GPUs to split, not for a ps task (always on the CPU), a divisor of the
    list, and a trainer that uses them. (On a chief-only host in a client mode it is ignored, as `gpus` is:
    plan_warnings says so.)"""
    per_task = host.gpus_per_task
    if per_task is None:
        return
    key = f"hosts[{i}].gpus_per_task"
    if not host.gpus:
        raise ConfigError(source, key, f"gpus_per_task = {per_task} but `{host.name}` lists no GPU: list its GPUs "
                          "(gpus = [0, 1, ...]) or remove gpus_per_task")
    if host.roles == ["ps"]:
        raise ConfigError(source, key, f"`{host.name}` runs only a ps task, and ps tasks never get GPUs (they "
                          "serve variables on the CPU): remove gpus_per_task and gpus")
    listed = f"the {len(host.gpus)} GPUs `{host.name}` lists (gpus = {host.gpus})"
    if why := _split_error(config, per_task, len(host.gpus), listed):
        raise ConfigError(source, key, why)


def _split_error(config: Config, per_task: int, count: int, listed: str) -> str | None:
    """Why `count` GPUs (`listed`) cannot go `per_task` to a task, if they cannot."""
    if count % per_task:
        divisors = ", ".join(str(d) for d in range(1, count + 1) if count % d == 0)
        return f"gpus_per_task = {per_task} does not divide {listed}: use one of {divisors}"
    if per_task > 1 and config.cluster.mode == "parameter-server-strategy" and config.training.command is None:
        return ("the built-in parameter-server-strategy trainer runs one replica per worker task: use "
                "gpus_per_task = 1, or your own `command`")
    return None


def _seats(config: Config, source: str) -> dict[Role, tuple[Seat, ...]]:
    """Each job's tasks on [[hosts]] (DESIGN.md "Plan rules"): a ps task per ps host, on the CPU; a worker
    per `gpus_per_task` listed GPUs (consecutive, in the listed order), else `workers` (default 1) on the
    CPU; the chief on the chief host, training (on its first GPUs, as many as a worker's) in
    TRAINING_CHIEF_MODES, else the client or coordinator on the CPU, on the first worker host when no host
    has the chief role."""
    mode = config.cluster.mode
    chief_host = next((i for i, h in enumerate(config.hosts) if "chief" in h.roles), None)
    seats: dict[Role, list[Seat]] = {"chief": [], "ps": [], "worker": []}
    for i, h in enumerate(config.hosts):
        gpus, per_task = h.gpus or [], gpus_per_task(h, mode)
        groups = [tuple(gpus[k:k + per_task]) for k in range(0, len(gpus), per_task)]
        if "ps" in h.roles:
            seats["ps"].append((i, ()))
        if i == chief_host and mode in TRAINING_CHIEF_MODES:
            seats["chief"].append((i, groups.pop(0) if groups else ()))
        if "worker" in h.roles:
            # no GPU left (the chief took them all): no worker; no GPU listed: CPU workers
            seats["worker"].extend((i, g) for g in (groups if groups or h.gpus else [()] * (h.workers or 1)))
    if not seats["worker"]:  # _check_hosts saw a worker host, so the chief took all its GPUs
        i = next(i for i, h in enumerate(config.hosts) if "worker" in h.roles)
        h = config.hosts[i]
        taken = len(seats["chief"][0][1])
        if taken == 1:
            raise ConfigError(
                source, f"hosts[{i}].gpus",
                f"no worker task left: the chief takes the first GPU of `{h.name}` and it has no "
                "other; list another GPU, or add a host with role `worker`",
            )
        why = (f"gpus_per_task = {taken}" if h.gpus_per_task is not None else
               "multi-worker-mirrored gives a task all of its host's GPUs unless gpus_per_task says otherwise")
        raise ConfigError(
            source, f"hosts[{i}].gpus_per_task",
            f"no worker task left: the chief takes all {taken} GPUs of `{h.name}` ({why}); set a smaller "
            "gpus_per_task, list more GPUs, or add a host with role `worker`",
        )
    if mode in CLIENT_CHIEF_MODES:
        client_host = chief_host if chief_host is not None else seats["worker"][0][0]
        seats["chief"].append((client_host, ()))
    else:
        _check_replicas(config, seats, source)
    return {job: tuple(s) for job, s in seats.items()}


def _check_replicas(config: Config, seats: Mapping[Role, list[Seat]], source: str) -> None:
    """multi-worker-mirrored: every training task has as many replicas (its GPUs, or its CPU). TensorFlow's
    all-reduce group is (this task's devices) x (tasks): a task with another count waits or fails."""
    if config.cluster.mode != "multi-worker-mirrored":
        return
    trainers = sorted((*seats["chief"], *seats["worker"]), key=lambda seat: seat[0])
    first = trainers[0]
    odd = next((seat for seat in trainers if len(seat[1]) != len(first[1])), None)
    if odd is None:
        return
    has = {seat: f"{len(seat[1])} GPU{'s' if len(seat[1]) > 1 else ''}" if seat[1] else "the CPU (one replica)"
           for seat in (first, odd)}
    i = odd[0] if odd[1] else first[0]  # a host with GPUs: one of the two has them
    raise ConfigError(
        source, f"hosts[{i}].gpus_per_task",
        f"multi-worker-mirrored needs as many replicas in every task (TensorFlow's all-reduce counts every task's "
        f"devices as its own): a task of `{config.hosts[first[0]].name}` has {has[first]}, one of "
        f"`{config.hosts[odd[0]].name}` {has[odd]}; give every task as many GPUs (gpus_per_task)",
    )


def slurm_job_counts(config: Config, source: str) -> dict[Role, int]:
    """Tasks per TF job of a [slurm] config (its `ps`, `workers`, `chief` and the mode's rules)."""
    assert config.slurm is not None
    return _slurm_jobs(config, config.slurm, source)


def _slurm_jobs(config: Config, slurm: SlurmSection, source: str) -> dict[Role, int]:
    """Tasks per TF job from `[slurm] ps, workers, chief` and the mode's rules, held against the nodes."""
    mode = config.cluster.mode
    ps = slurm.ps
    if mode == "multi-worker-mirrored" and ps:
        raise ConfigError(source, "slurm.ps", "multi-worker-mirrored mode has no parameter server (the workers "
                          "all-reduce their gradients): set ps = 0, or use mode \"parameter-server-strategy\"",
                          suggestion="ps = 0")
    if ps == 0 and needs_ps(config):
        raise ConfigError(source, "slurm.ps", f"{why_ps_needed(config)}: set ps = 1 or more", suggestion="ps = 1")
    if mode in CLIENT_CHIEF_MODES and slurm.chief is False:
        raise ConfigError(source, "slurm.chief", f"{mode} mode always has its chief task (its "
                          f"{'client' if mode == 'in-graph' else 'coordinator'}): remove chief = false")
    jobs: dict[Role, int] = {"chief": 1 if slurm.chief or mode in CLIENT_CHIEF_MODES else 0,
                             "ps": (1 if needs_ps(config) else 0) if ps is None else ps, "worker": slurm.workers}
    total = sum(jobs.values())
    if total < slurm.nodes:
        raise ConfigError(source, "slurm.nodes", f"nodes = {slurm.nodes} but the job has {total} tasks, and "
                          f"Slurm gives every node of a step at least one: use nodes = {total} or fewer")
    busiest = -(-total // slurm.nodes)  # tasks on the busiest node: the plan spreads them evenly
    if 0 < slurm.gpus_per_node < busiest:
        raise ConfigError(source, "slurm.gpus_per_node", f"gpus_per_node = {slurm.gpus_per_node} cannot give "
                          f"each of the {busiest} tasks of a node a GPU (SlurmClusterResolver refuses it "
                          f"too): use {busiest} or more, or more nodes")
    _check_slurm_gpus_per_task(config, slurm, busiest, source)
    return jobs


def slurm_gpus_per_task(slurm: SlurmSection, busiest: int) -> int:
    """GPUs per task of a [slurm] job whose busiest node runs `busiest` tasks: its `gpus_per_task`, else
    gpus_per_node // busiest (SlurmClusterResolver's split)."""
    return slurm.gpus_per_task if slurm.gpus_per_task is not None else slurm.gpus_per_node // busiest


def _check_slurm_gpus_per_task(config: Config, slurm: SlurmSection, busiest: int, source: str) -> None:
    """`[slurm] gpus_per_task`, as a host's: GPUs to split, a divisor of gpus_per_node, room for the busiest
    node's tasks, and a trainer that uses them."""
    per_task, per_node = slurm.gpus_per_task, slurm.gpus_per_node
    if per_task is None:
        return
    key = "slurm.gpus_per_task"
    if per_node == 0:
        raise ConfigError(source, key, f"gpus_per_task = {per_task} but the job asks for no GPU: set "
                          "gpus_per_node too, or remove gpus_per_task")
    if why := _split_error(config, per_task, per_node, f"gpus_per_node = {per_node}"):
        raise ConfigError(source, key, why)
    if per_task * busiest > per_node:
        raise ConfigError(source, key, f"gpus_per_task = {per_task} with {busiest} tasks on the busiest node needs "
                          f"{per_task * busiest} GPUs there, gpus_per_node = {per_node}: use gpus_per_task = "
                          f"{per_node // busiest}, more nodes, or more GPUs per node")


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


def _check_model(config: Config, source: str) -> None:
    """`[training] model`: a built-in model, or the user's own as package.module:build; its `model_args`
    (a built-in model's, or the sizes a user's model borrows from mlp). A user's `command` reads its own."""
    training = config.training
    if training.command is not None:
        return
    if training.model not in BUILTIN_SHAPES and ":" not in training.model:
        close = difflib.get_close_matches(training.model, list(BUILTIN_SHAPES), n=1)
        raise ConfigError(
            source, "training.model",
            f"unknown model `{training.model}`: use a built-in one ({', '.join(BUILTIN_SHAPES)}) "
            'or your own as "package.module:build"',
            suggestion=close[0] if close else None,
        )
    try:
        check_model_args(training.model, training.model_args)
    except ModelArgError as exc:
        key = ("training", "model_args", exc.key) if exc.key else ("training", "model_args")
        raise ConfigError(source, format_key_path(key), exc.message, suggestion=exc.suggestion) from None


def _check_port_room(config: Config, jobs: Mapping[Role, int], source: str) -> None:
    """One port per task, then one per machine for its supervisor's peer channel, from base_port."""
    machines = config.slurm.nodes if config.slurm else len(config.hosts)
    total = sum(jobs.values()) + machines
    base_port = config.cluster.base_port
    last = base_port + total - 1
    if last > MAX_PORT:
        raise ConfigError(
            source, "cluster.base_port",
            f"base_port {base_port} leaves no room for the plan's {total} ports (one per task, one per host's "
            f"supervisor) (the last would be {last} > {MAX_PORT}); use base_port <= {MAX_PORT + 1 - total}",
        )


def _check_slowdown(config: Config, jobs: Mapping[Role, int], source: str) -> None:
    trainers: tuple[Role, ...] = ("chief", "worker")
    names = [f"{job}:{i}" for job in trainers for i in range(jobs[job])]
    for key in config.training.slowdown:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            raise ConfigError(
                source, f'training.slowdown."{key}"',  # the schema let only keys like worker:1 in: always quoted
                f"the plan has no task {key} (its training tasks: {', '.join(names)})",
                suggestion=close[0] if close else None,
            )


def _check_backup_workers(config: Config, jobs: Mapping[Role, int], source: str) -> None:
    training, mode = config.training, config.cluster.mode
    trainers = jobs["worker"] + (jobs["chief"] if mode == "between-graph" else 0)
    if training.sync_replicas and mode != "between-graph":
        raise ConfigError(source, "training.sync_replicas",
                          f"sync_replicas is for between-graph mode; {mode} is "
                          + ("synchronous already" if mode != "parameter-server-strategy"
                             else "asynchronous by design (use multi-worker-mirrored for synchronous steps)"))
    if training.sync_replicas and training.backup_workers >= trainers:
        raise ConfigError(
            source, "training.backup_workers",
            f"backup_workers = {training.backup_workers} leaves no replica to aggregate: the plan has "
            f"{trainers} training tasks; use at most {trainers - 1}",
        )
