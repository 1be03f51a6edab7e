"""The plan's data: what runs where. Immutable, printable, and the one wire format after `start`.

`ClusterPlan.to_json()` is what the run record keeps and what every host gets in run.json (the
cluster side reads it as plain JSON: training/run/context.py); `ClusterPlan.from_json()` is the single
typed decoder back (the run record, `status`, `stop`, `logs` and the collector all go through it).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, cast, get_args

from orchestrator.config.kinds import Transport
from orchestrator.config.modes import Mode
from orchestrator.config.schema import SSHOptions, TrainingSection
from orchestrator.plan.names import task_name

Job = Literal["chief", "ps", "worker"]
JOBS: tuple[Job, ...] = get_args(Job)
JOB_ORDER: tuple[Job, ...] = ("chief", "ps", "worker")  # TF_CONFIG lists jobs in this order


class PlanDecodeError(ValueError):
    """A plan JSON that is not what `to_json` writes (a damaged or foreign run record)."""


@dataclass(frozen=True)
class TaskPlan:
    job: Job
    index: int
    host: str  # host name from hosts.toml
    address: str  # the address other tasks use to reach it
    port: int
    gpus: tuple[int, ...]  # physical GPU indexes on the host (CUDA_VISIBLE_DEVICES), none = the CPU
    # where this task's compute is placed, e.g. /job:worker/task:1/device:GPU:0; a task with several GPUs
    # sees them as GPU:0 ... GPU:len(gpus)-1 (the in-graph client puts a tower on each)
    device: str
    cuda_visible_devices: str
    tf_config: dict[str, Any]
    command: list[str]  # argv run by the host's supervisor (cwd = the run's code/ dir)
    env: dict[str, str]
    is_chief: bool  # initialises, checkpoints, writes summaries
    in_cluster: bool = True  # False only for a task that runs no TF server

    @property
    def name(self) -> str:
        return task_name(self.job, self.index)

    @property
    def target(self) -> str:
        return f"{self.address}:{self.port}"


@dataclass(frozen=True)
class HostPlan:
    name: str
    address: str
    transport: Transport
    python: str
    workdir: str
    ssh: SSHOptions
    roles: tuple[str, ...]
    tasks: tuple[str, ...]  # task names ("worker:0") on this host
    login_shell: bool = False  # [remote] login_shell: run tfcluster's commands under `$SHELL -l`
    dial_address: str = ""  # where the other machines reach it (an ssh alias's HostName), "" = address
    control_port: int = 0  # its supervisor's peer channel (training/supervisor/peers.py), 0 = none
    job_id: str = ""  # transport "slurm": the Slurm job whose steps reach this node (address: its node name)
    via: str = ""  # transport "slurm": the login host where srun runs, over [ssh]; "" = this machine

    @property
    def control(self) -> str:
        return f"{self.dial_address or self.address}:{self.control_port}"


def _host_json(h: HostPlan) -> dict[str, Any]:
    """asdict(h) without its deep copy of the pydantic SSH options (a start saves the plan several times:
    at 1024 hosts the copies were a tenth of start's CPU)."""
    data = {f.name: getattr(h, f.name) for f in fields(h)}
    data["roles"], data["tasks"] = list(h.roles), list(h.tasks)
    data["ssh"] = h.ssh.model_dump(exclude_none=True)
    return data


@dataclass(frozen=True)
class ClusterPlan:
    cluster_name: str
    mode: Mode
    cluster_spec: dict[str, list[str]]
    hosts: tuple[HostPlan, ...]
    tasks: tuple[TaskPlan, ...]
    training: TrainingSection  # shipped to every host in run.json as plain data
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

    def to_json(self, compact: bool = False) -> dict[str, Any]:
        """`compact` (the run record): each task's TF_CONFIG, which repeats the whole cluster (O(hosts) per
        task, so O(hosts^2) per plan: 166 MB at 1024 hosts), is left out when it is the standard one, and
        `from_json` derives it again. Without it: every field, as the cluster side reads it."""
        spec_json = json.dumps(self.cluster_spec, separators=(",", ":")) if compact else ""
        return {
            "cluster_name": self.cluster_name, "mode": self.mode, "cluster_spec": self.cluster_spec,
            "hosts": [_host_json(h) for h in self.hosts],
            "tasks": [self._compact_task(t, spec_json) if compact else asdict(t) for t in self.tasks],
            "training": self.training.model_dump(), "uses_user_command": self.uses_user_command,
            "warnings": list(self.warnings),
        }

    def _compact_task(self, t: TaskPlan, spec_json: str) -> dict[str, Any]:
        d = {f.name: getattr(t, f.name) for f in fields(TaskPlan)}  # shallow: nothing is copied
        derived = []
        task_part = {"type": t.job, "index": t.index}
        if len(t.tf_config) == 2 and t.tf_config.get("task") == task_part and (
                t.tf_config.get("cluster") is self.cluster_spec or t.tf_config.get("cluster") == self.cluster_spec):
            del d["tf_config"]
            derived.append("tf_config")
        if t.env.get("TF_CONFIG") == tf_config_env(spec_json, t.job, t.index):
            d["env"] = {k: v for k, v in t.env.items() if k != "TF_CONFIG"}
            derived.append("TF_CONFIG")
        if derived:
            d["derived"] = derived
        return d

    @classmethod
    def from_json(cls, data: object) -> ClusterPlan:
        """The inverse of to_json; PlanDecodeError (one line) for anything else."""
        try:
            d = _mapping(data, "plan")
            hosts = tuple(_host(h) for h in _list(d["hosts"], "hosts"))
            spec = {str(k): [str(a) for a in _list(v, k)] for k, v in _mapping(d["cluster_spec"], "cluster_spec").items()}
            spec_json = json.dumps(spec, separators=(",", ":"))
            tasks = tuple(_task(t, spec, spec_json) for t in _list(d["tasks"], "tasks"))
            mode = d["mode"]
            if mode not in get_args(Mode):
                raise PlanDecodeError(f"unknown mode {mode!r}")
            return cls(
                cluster_name=str(d["cluster_name"]), mode=cast(Mode, mode), cluster_spec=spec,
                hosts=hosts, tasks=tasks,
                training=TrainingSection.model_validate(_mapping(d["training"], "training"), strict=False),
                uses_user_command=bool(d["uses_user_command"]),
                warnings=tuple(str(w) for w in d.get("warnings", ())),
            )
        except PlanDecodeError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise PlanDecodeError(f"not a tfcluster plan ({type(exc).__name__}: {str(exc)[:120]})") from None


def _mapping(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PlanDecodeError(f"{what} is {type(value).__name__}, not an object")
    return value


def _list(value: object, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise PlanDecodeError(f"{what} is {type(value).__name__}, not a list")
    return value


def _job(value: object) -> Job:
    for job in JOBS:
        if value == job:
            return job
    raise PlanDecodeError(f"unknown job {value!r}")


def tf_config_env(spec_json: str, job: str, index: int) -> str:
    """The TF_CONFIG value of a task: json.dumps({"cluster": spec, "task": ...}, separators=(",", ":"))."""
    return f'{{"cluster":{spec_json},"task":{{"type":{json.dumps(job)},"index":{index}}}}}'


def _task(raw: object, spec: dict[str, list[str]], spec_json: str) -> TaskPlan:
    t = _mapping(raw, "task")
    job, index = _job(t["job"]), int(t["index"])
    derived = t.get("derived") or ()  # left out by to_json(compact=True): the standard values
    env = {str(k): str(v) for k, v in _mapping(t["env"], "env").items()}
    if "TF_CONFIG" in derived:
        env = {"TF_CONFIG": tf_config_env(spec_json, job, index), **env}
    tf_config = ({"cluster": spec, "task": {"type": job, "index": index}} if "tf_config" in derived
                 else _mapping(t["tf_config"], "tf_config"))
    return TaskPlan(
        job=job, index=index, host=str(t["host"]), address=str(t["address"]),
        port=int(t["port"]), gpus=_gpus(t), device=str(t["device"]),
        cuda_visible_devices=str(t["cuda_visible_devices"]), tf_config=tf_config,
        command=[str(a) for a in _list(t["command"], "command")], env=env,
        is_chief=bool(t["is_chief"]), in_cluster=bool(t.get("in_cluster", True)),
    )


def _gpus(t: dict[str, Any]) -> tuple[int, ...]:
    """A task's GPUs: `gpus`, or the one `gpu` (null: the CPU) of a record written before tasks had several."""
    if "gpus" in t:
        gpus = t["gpus"]  # a tuple where to_json's dict was not through JSON
        return tuple(int(g) for g in (gpus if isinstance(gpus, tuple) else _list(gpus, "gpus")))
    gpu = t["gpu"]
    return () if gpu is None else (int(gpu),)


def _host(raw: object) -> HostPlan:
    h = _mapping(raw, "host")
    transport = h.get("transport", "ssh")
    if transport not in get_args(Transport):
        raise PlanDecodeError(f"unknown transport {transport!r}")
    return HostPlan(
        name=str(h["name"]), address=str(h["address"]), transport=cast(Transport, transport),
        python=str(h["python"]), workdir=str(h["workdir"]),
        ssh=SSHOptions.model_validate(_mapping(h.get("ssh", {}), "ssh"), strict=False),
        roles=tuple(str(r) for r in _list(h.get("roles", []), "roles")),
        tasks=tuple(str(n) for n in _list(h.get("tasks", []), "tasks")),
        dial_address=str(h.get("dial_address", "")), control_port=int(h.get("control_port", 0)),
        login_shell=bool(h.get("login_shell", False)), job_id=str(h.get("job_id", "")), via=str(h.get("via", "")),
    )
