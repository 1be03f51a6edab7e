"""The PS-bandwidth scaling model: the step rate a parameter server's link allows, and the PS count that
lifts it. Pure: from the plan's model shapes, its placement rule and a link bandwidth.

Each training step moves every variable out of the PS that holds it and a gradient of the same size back
in (orchestrator/plan/ps_load.py, with the greedy placement of training/cluster/placement.py):
- between-graph and parameter-server-strategy: each of the T trainers does so per step, so a PS holding
  B bytes carries 2 x T x B bytes per trainer step; at r steps/s per trainer, 2·T·B·r bytes/s;
- in-graph: each of the T towers pulls every variable per step and the client pushes one averaged
  gradient, (T + 1) x B per step of the whole cluster (each tower steps at that rate);
- multi-worker-mirrored: no PS (the workers all-reduce), so no PS ceiling.
The link: `capacity_Bps` bytes per second in and out together (a full-duplex NIC of N Gb/s carries N each
way, so 2 x N/8 GB/s; a measured link is the transfer's both-ways total, training/probes/nic_probe.py). The
busiest PS bounds every trainer (they step through all PS tasks each step): ceiling = capacity / load
per step of the busiest PS.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.plan.model import ClusterPlan
from orchestrator.plan.names import task_name
from orchestrator.plan.ps_load import GLOBAL_STEP_BYTES, human_bytes, trainer_count
from training.cluster.placement import greedy_assign
from training.models.sizes import BUILTIN_SHAPES

MAX_PS_ADVISED = 64
GBIT_BYTES = 1e9 / 8


def nic_capacity_Bps(gbps_each_way: float) -> float:
    """A full-duplex NIC of `gbps_each_way`: bytes per second in and out together."""
    return 2.0 * gbps_each_way * GBIT_BYTES


@dataclass(frozen=True)
class PsCeiling:
    mode: str
    model: str
    model_bytes: int
    trainers: int
    ps_count: int
    bytes_on_ps: dict[str, int]  # "ps:0" -> bytes of the variables placed there
    transfers_per_step: float  # how many times its bytes the busiest PS moves per (per-worker) step
    capacity_Bps: float
    steps_per_s_per_worker: float  # the ceiling
    busiest_ps: str

    @property
    def bytes_per_step(self) -> float:
        return self.transfers_per_step * self.bytes_on_ps[self.busiest_ps]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "bytes_per_step": self.bytes_per_step}


def variable_sizes(plan: ClusterPlan) -> list[int] | None:
    """Bytes of the global step then each model variable, in creation order; None when unknown."""
    shapes_of = BUILTIN_SHAPES.get(plan.training.model)
    if plan.uses_user_command or shapes_of is None:
        return None
    return [GLOBAL_STEP_BYTES, *(v.nbytes for v in shapes_of(plan.training.model_args))]


def bytes_per_ps(sizes: list[int], ps_count: int) -> list[int]:
    on_ps = [0] * ps_count
    for size, ps in zip(sizes, greedy_assign(sizes, ps_count), strict=True):
        on_ps[ps] += size
    return on_ps


def transfers_per_step(mode: str, trainers: int) -> float | None:
    """How many times its variables' bytes a PS moves per step of one worker (None: no PS)."""
    if mode in ("between-graph", "parameter-server-strategy"):
        return 2.0 * trainers
    if mode == "in-graph":
        return trainers + 1.0
    return None


def ps_ceiling(plan: ClusterPlan, capacity_Bps: float, ps_count: int | None = None) -> PsCeiling | None:
    """The ceiling for this plan (or with `ps_count` PS tasks instead of the plan's); None without a PS
    or with a model of unknown size."""
    sizes = variable_sizes(plan)
    trainers = trainer_count(plan)
    per_step = transfers_per_step(plan.mode, trainers)
    count = ps_count if ps_count is not None else sum(1 for t in plan.tasks if t.job == "ps")
    if sizes is None or per_step is None or count < 1:
        return None
    on_ps = bytes_per_ps(sizes, count)
    busiest = max(range(count), key=lambda i: (on_ps[i], -i))
    ceiling = capacity_Bps / (per_step * on_ps[busiest]) if on_ps[busiest] else float("inf")
    return PsCeiling(plan.mode, plan.training.model, sum(sizes[1:]), trainers, count,
                     {task_name("ps", i): b for i, b in enumerate(on_ps)}, per_step, capacity_Bps, ceiling,
                     task_name("ps", busiest))


@dataclass(frozen=True)
class PsAdvice:
    ceiling: PsCeiling
    wanted_steps_per_s: float  # per worker
    ps_needed: int | None  # None: no PS count reaches it (the largest variable alone is too big)
    best: PsCeiling  # the ceiling with ps_needed (or the most PS tasks tried)

    @property
    def bound(self) -> bool:
        return self.ceiling.steps_per_s_per_worker < self.wanted_steps_per_s

    def to_json(self) -> dict[str, Any]:
        return {"ceiling": self.ceiling.to_json(), "wanted_steps_per_s": self.wanted_steps_per_s,
                "ps_needed": self.ps_needed, "bound": self.bound,
                "ceiling_with_ps_needed": self.best.steps_per_s_per_worker}

    def lines(self) -> list[str]:
        c = self.ceiling
        link = f"{human_bytes(c.capacity_Bps)}/s in+out"
        out = [f"PS ceiling ({c.mode}, {c.model}): {c.busiest_ps} holds {human_bytes(c.bytes_on_ps[c.busiest_ps])} "
               f"and moves {c.transfers_per_step:g} x that per worker step ({c.trainers} trainers) over a link of "
               f"{link} → at most {c.steps_per_s_per_worker:.3g} steps/s per worker"]
        if not self.bound:
            out.append(f"  not the limit at {self.wanted_steps_per_s:.3g} steps/s per worker: {c.ps_count} PS "
                       f"task(s) are enough")
        elif self.ps_needed is not None:
            out.append(f"  for {self.wanted_steps_per_s:.3g} steps/s per worker: {self.ps_needed} PS tasks "
                       f"(ceiling {self.best.steps_per_s_per_worker:.3g} steps/s)")
        else:
            out.append(f"  no PS count reaches {self.wanted_steps_per_s:.3g} steps/s per worker: the largest "
                       f"variable alone caps it at {self.best.steps_per_s_per_worker:.3g} with "
                       f"{self.best.ps_count} PS tasks (use more `shards`)")
        return out


def advise(plan: ClusterPlan, capacity_Bps: float, wanted_steps_per_s: float) -> PsAdvice | None:
    """The plan's ceiling and the fewest PS tasks whose ceiling reaches `wanted_steps_per_s` per worker."""
    ceiling = ps_ceiling(plan, capacity_Bps)
    if ceiling is None:
        return None
    sizes = variable_sizes(plan) or []
    tried = [c for k in range(1, min(MAX_PS_ADVISED, len(sizes)) + 1) if (c := ps_ceiling(plan, capacity_Bps, k))]
    for candidate in tried:
        if candidate.steps_per_s_per_worker >= wanted_steps_per_s:
            return PsAdvice(ceiling, wanted_steps_per_s, candidate.ps_count, candidate)
    best = max(tried, key=lambda c: c.steps_per_s_per_worker, default=ceiling)
    return PsAdvice(ceiling, wanted_steps_per_s, None, best)
