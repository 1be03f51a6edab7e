"""The entries from hosts.toml (or a Config built in code) to a plan: validate once
(orchestrator.config.load, orchestrator.config.validate: every refusal, with the file's line), then build (orchestrator.plan.build
for [[hosts]], orchestrator.plan.slurm for a [slurm] job) without a check of its own.

- `plan_file(path, mode=None)`: the [[hosts]] plan that `start`, `check`, `bench` and `demo` run;
- `slurm_plan_file(path, nodes=None)`: a [slurm] job's plan (`export slurm`, and a job on its allocation);
- `any_plan_file(path, mode=None)`: either, as `tfcluster plan` shows it and `tfcluster start` runs it;
- `plan_config(config)`: the [[hosts]] plan of a Config built in code (bench cells, tests);
- `cluster_plan(config)`: either, of a Config built in code (a bench cell of a [slurm] file: in node indexes).
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.config.load import validate_file
from orchestrator.config.modes import Mode
from orchestrator.config.schema import Config
from orchestrator.config.validate import validate
from orchestrator.plan.build import build_plan
from orchestrator.plan.model import ClusterPlan
from orchestrator.plan.slurm import SlurmNode, SlurmPlan, plan_slurm


def plan_file(path: str | Path, mode: Mode | None = None) -> ClusterPlan:
    """The plan for hosts.toml at `path` (optionally in another mode). Raises ConfigError with a line."""
    return build_plan(validate_file(path, mode, machines="hosts"))


def slurm_plan_file(path: str | Path, nodes: list[SlurmNode] | None = None) -> SlurmPlan:
    """The plan of the [slurm] job of hosts.toml at `path`, in node indexes or on the allocation's `nodes`.
    Raises ConfigError with a line (also when the file has no [slurm])."""
    return plan_slurm(validate_file(path, machines="slurm"), nodes)


def any_plan_file(path: str | Path, mode: Mode | None = None) -> ClusterPlan | SlurmPlan:
    """The plan of hosts.toml's [[hosts]], or of its [slurm] job (optionally in another mode)."""
    valid = validate_file(path, mode)
    return plan_slurm(valid) if valid.config.slurm is not None else build_plan(valid)


def plan_config(config: Config, source: str = "hosts.toml") -> ClusterPlan:
    """The [[hosts]] plan of a Config built in code, held to the same rules as a file (errors carry key
    paths, not lines)."""
    return build_plan(validate(config, source, machines="hosts"))


def cluster_plan(config: Config, source: str = "hosts.toml") -> ClusterPlan:
    """The plan of a Config built in code, of its [[hosts]] or of its [slurm] job (in node indexes)."""
    valid = validate(config, source)
    return plan_slurm(valid).plan if config.slurm is not None else build_plan(valid)
