"""Expected parameter-server traffic, before anything runs: bytes on each PS × 2 × trainers × steps/s.

Each training step, every training task pulls each variable from the PS that holds it and pushes a
gradient of the same size back (in-graph: each tower does, the same order of traffic). Variables are
spread over the PS tasks with the rule the TF programs use (training.cluster.placement.greedy_assign, in
creation order, the global step first), so the estimate names the same PS the run will load.
Only built-in models have known sizes; for the user's own program or model there is no estimate.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.plan.model import ClusterPlan
from training.cluster.placement import greedy_assign
from training.models.sizes import BUILTIN_SHAPES

GLOBAL_STEP_BYTES = 8  # int64, created before the model's variables and placed by the same rule


@dataclass(frozen=True)
class PsLoad:
    task: str  # "ps:0"
    address: str
    variable_bytes: int
    bytes_per_sec: float  # pulled + pushed, all trainers together


@dataclass(frozen=True)
class PsLoadEstimate:
    model: str
    model_bytes: int
    trainers: int  # tasks that pull and push every step
    steps_per_sec: float  # per trainer: an assumption, not a measurement
    per_ps: tuple[PsLoad, ...]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def one_line(self) -> str:
        loads = ", ".join(f"{p.task} {human_bytes(p.variable_bytes)} → {human_bytes(p.bytes_per_sec)}/s" for p in self.per_ps)
        return (
            f"PS load estimate ({self.model}, {human_bytes(self.model_bytes)} of variables, {self.trainers} "
            f"trainers × 2 (pull+push) × {self.steps_per_sec:g} steps/s each, an assumption: --steps-per-sec): {loads}"
        )


def trainer_count(plan: ClusterPlan) -> int:
    """What pulls and pushes every step: workers, plus a between-graph chief (it trains too); in-graph, the
    client's towers, one per GPU of each worker (training/graph/in_graph.py)."""
    if plan.mode == "in-graph":
        return sum(max(1, len(t.gpus)) for t in plan.tasks if t.job == "worker")
    jobs = ("worker", "chief") if plan.mode == "between-graph" else ("worker",)
    return sum(1 for t in plan.tasks if t.job in jobs)


def estimate_ps_load(plan: ClusterPlan, steps_per_sec: float) -> PsLoadEstimate | None:
    """None when the model's size is unknown (the user's own program or model) or there is no PS."""
    model = plan.training.model
    shapes_of = BUILTIN_SHAPES.get(model)
    ps_tasks = sorted((t for t in plan.tasks if t.job == "ps"), key=lambda t: t.index)
    if plan.uses_user_command or shapes_of is None or not ps_tasks:
        return None
    sizes = [GLOBAL_STEP_BYTES, *(v.nbytes for v in shapes_of(plan.training.model_args))]
    on_ps = [0] * len(ps_tasks)
    for size, ps in zip(sizes, greedy_assign(sizes, len(ps_tasks)), strict=True):
        on_ps[ps] += size
    trainers = trainer_count(plan)
    per_ps = tuple(
        PsLoad(t.name, t.target, on_ps[t.index], on_ps[t.index] * 2 * trainers * steps_per_sec)
        for t in ps_tasks
    )
    return PsLoadEstimate(model, sum(sizes[1:]), trainers, steps_per_sec, per_ps)


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"  # pragma: no cover - unreachable
