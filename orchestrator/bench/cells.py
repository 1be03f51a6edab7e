"""The cells of a bench, and the cluster each one runs: mode x workers x variant, repeated, interleaved.

A cell's cluster is the user's hosts.toml, changed only where the bench says so, then planned by the real
planner (orchestrator.plan.from_file.plan_config), so every rule of a normal `start` holds:
- workers: the first N worker tasks hosts.toml lists (hosts in file order, a host's `gpus`/`workers` in
  order); a host left without a task is dropped (nothing starts there); a [slurm] job's `workers` = N, on
  no more nodes than it then has tasks. A host's GPUs per task are its `gpus_per_task`, else 1 in every
  mode (multi-worker-mirrored's default, all of them in one task, would change the cell's workers);
- mode: `[cluster] mode`; multi-worker-mirrored has no parameter server, so `ps` roles are dropped (a
  [slurm] job's `ps` = 0);
- training: the model, its arguments and batch size the bench was given; `steps` (a huge number when the
  cell is timed in seconds: the bench stops it); `slowdown` from the variant and `--pace`.
Variants: `baseline` always; `straggler` (with --straggler) and `kill` (with --kill) when the cell has
that task; `resize` (with --resize) when hosts.toml lists one worker more than the cell has, the worker
that joins (`grown_plan`: the first N+1). A resize cell keeps hosts.toml's checkpoint settings: the steps
a restarting mode loses are those since its last checkpoint, as the user's run would lose them. Order: repeat by repeat, so a change in the machine's load hits every mode alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.bench.spec import BenchSpec, TaskRef
from orchestrator.config.modes import TRAINING_CHIEF_MODES, Mode
from orchestrator.config.rules import slurm_job_counts
from orchestrator.config.schema import Config, HostConfig
from orchestrator.errors import UsageError
from orchestrator.plan.from_file import cluster_plan
from orchestrator.plan.model import ClusterPlan

Variant = Literal["baseline", "straggler", "kill", "resize"]
ENDLESS_STEPS = 1_000_000_000  # a cell timed in seconds runs until the bench stops it


@dataclass(frozen=True)
class Cell:
    mode: Mode
    workers: int
    variant: Variant
    repeat: int  # 0-based

    @property
    def key(self) -> str:
        return f"{self.mode}/w{self.workers}/{self.variant}#{self.repeat + 1}"

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "workers": self.workers, "variant": self.variant, "repeat": self.repeat}


def listed_workers(config: Config) -> int:
    """Worker tasks hosts.toml gives: one per `gpus_per_task` (default 1) listed GPUs, else `workers`
    (default 1) per worker host."""
    if config.slurm is not None:
        return config.slurm.workers
    return sum(_worker_slots(h) for h in config.hosts if "worker" in h.roles)


def _worker_slots(host: HostConfig) -> int:
    return len(host.gpus) // _gpus_per_task(host) if host.gpus else (host.workers or 1)


def _gpus_per_task(host: HostConfig) -> int:
    return host.gpus_per_task or 1


def default_worker_counts(available: int) -> tuple[int, ...]:
    """1, 2, 4, ... below the listed count, and the listed count itself."""
    counts, n = [], 1
    while n < available:
        counts.append(n)
        n *= 2
    return (*counts, available)


def worker_counts(spec: BenchSpec, config: Config) -> tuple[int, ...]:
    available = listed_workers(config)
    if spec.workers is None:
        return default_worker_counts(available)
    too_many = [n for n in spec.workers if n > available]
    if too_many:
        raise UsageError(f"--workers {','.join(map(str, spec.workers))}: {spec.hosts_file} lists {available} "
                         f"worker task(s), so at most {available}")
    return spec.workers


def has_task(config: Config, mode: Mode, workers: int, task: TaskRef) -> bool:
    if task.job == "worker":
        return task.index < workers
    chief = bool(config.slurm.chief) if config.slurm is not None else any("chief" in h.roles for h in config.hosts)
    return mode in TRAINING_CHIEF_MODES and chief and task.index == 0


def cells(spec: BenchSpec, config: Config) -> list[Cell]:
    counts = worker_counts(spec, config)
    out: list[Cell] = []
    for repeat in range(spec.repeat):
        for mode in spec.modes:
            for n in counts:
                out.append(Cell(mode, n, "baseline", repeat))
                if spec.straggler is not None and has_task(config, mode, n, spec.straggler.task):
                    out.append(Cell(mode, n, "straggler", repeat))
                if spec.kill is not None and has_task(config, mode, n, spec.kill.task):
                    out.append(Cell(mode, n, "kill", repeat))
                if spec.resize is not None and n < listed_workers(config):
                    out.append(Cell(mode, n, "resize", repeat))
    return out


def with_workers(config: Config, n: int) -> Config:
    """The first `n` worker tasks of hosts.toml; hosts left with no role are dropped."""
    if config.slurm is not None:
        return config.model_copy(update={"slurm": config.slurm.model_copy(update={"workers": n})})
    hosts: list[HostConfig] = []
    left = n
    for listed in config.hosts:
        h = listed  # as many GPUs per task in every mode (ps tasks take none):
        if listed.gpus and listed.roles != ["ps"]:
            h = listed.model_copy(update={"gpus_per_task": _gpus_per_task(listed)})
        if "worker" not in h.roles:
            hosts.append(h)
            continue
        keep = min(_worker_slots(h), left)
        left -= keep
        if keep == 0:
            roles = [r for r in h.roles if r != "worker"]
            if roles:
                hosts.append(h.model_copy(update={"roles": roles, "workers": None, "gpus": None,
                                                  "gpus_per_task": None}))
            continue
        if h.gpus:
            hosts.append(h.model_copy(update={"gpus": h.gpus[:keep * _gpus_per_task(h)]}))
        else:
            hosts.append(h.model_copy(update={"workers": keep if h.workers is not None else None}))
    return config.model_copy(update={"hosts": hosts})


def without_ps(config: Config) -> Config:
    if config.slurm is not None:
        return config.model_copy(update={"slurm": config.slurm.model_copy(update={"ps": 0})})
    hosts = []
    for h in config.hosts:
        roles = [r for r in h.roles if r != "ps"]
        if roles:
            hosts.append(h.model_copy(update={"roles": roles}))
    return config.model_copy(update={"hosts": hosts})


def fit_nodes(config: Config) -> Config:
    """A [slurm] job on no more nodes than it has tasks (Slurm gives every node of a step one)."""
    if config.slurm is None:
        return config
    tasks = sum(slurm_job_counts(config, "hosts.toml").values())
    return config.model_copy(update={"slurm": config.slurm.model_copy(update={"nodes": min(config.slurm.nodes, tasks)})})


def slowdown_for(spec: BenchSpec, plan_trainers: list[str], variant: Variant) -> dict[str, float]:
    """Every trainer at `pace`; the straggler (in its variant) at pace x factor. Keys like `worker:1`."""
    slow = {name: spec.pace for name in plan_trainers}
    if variant == "straggler" and spec.straggler is not None:
        slow[spec.straggler.task.name] = spec.pace * spec.straggler.factor
    return {k: v for k, v in slow.items() if v > 1.0}


def trainer_names(config: Config, mode: Mode, source: str) -> list[str]:
    """The tasks `slowdown` can slow in this mode: workers, and the chief where it trains."""
    plan = cluster_plan(config, source)
    return [t.name for t in plan.tasks if t.job == "worker" or (t.job == "chief" and mode in TRAINING_CHIEF_MODES)]


def cell_config(spec: BenchSpec, base: Config, cell: Cell) -> Config:
    config = with_workers(base, cell.workers)
    config = config.model_copy(update={"cluster": config.cluster.model_copy(update={"mode": cell.mode})})
    if cell.mode == "multi-worker-mirrored":
        config = without_ps(config)
    config = fit_nodes(config)
    training: dict[str, Any] = {"steps": spec.steps if spec.steps is not None else ENDLESS_STEPS}
    if spec.model is not None and spec.model != config.training.model:
        training["model"] = spec.model
        training["model_args"] = {}
    if spec.model_args:
        training["model_args"] = {**training.get("model_args", config.training.model_args), **spec.model_args}
    if spec.batch_size is not None:
        training["batch_size"] = spec.batch_size
    if cell.variant != "resize":  # (a resize cell's restart resumes from the user's checkpoints)
        # A checkpoint costs a pause the bench would measure as training speed: only by time, rarely.
        training["checkpoint_every_steps"] = None
        training["checkpoint_every_secs"] = 3600.0
    config = config.model_copy(update={"training": config.training.model_copy(update=training)})
    slowdown = slowdown_for(spec, trainer_names(config, cell.mode, spec.hosts_file), cell.variant)
    return config.model_copy(update={"training": config.training.model_copy(update={"slowdown": slowdown})})


def cell_plan(spec: BenchSpec, base: Config, cell: Cell) -> ClusterPlan:
    """The cell's plan, through the real planner (ConfigError names the key it objects to)."""
    return cluster_plan(cell_config(spec, base, cell), spec.hosts_file)


def grown_plan(spec: BenchSpec, base: Config, cell: Cell) -> ClusterPlan:
    """A resize cell's plan with the next worker hosts.toml lists (on its own host when it has one)."""
    return cell_plan(spec, base, Cell(cell.mode, cell.workers + 1, cell.variant, cell.repeat))
