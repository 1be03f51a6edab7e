"""A validated `[slurm]` Config -> the ClusterPlan of its job, laid out as TensorFlow's SlurmClusterResolver
lays out the same job counts. Pure: the allocation's nodes, when known, are given.

What the resolver does (tensorflow/python/distribute/cluster_resolver/slurm_cluster_resolver.py):
- ranks (SLURM_PROCID) go to the jobs in sorted job-name order, chief, ps, worker (JOB_ORDER), each job's
  tasks in index order;
- the step's nodes, sorted by name (Python's sort), take consecutive ranks, as many as Slurm put on each
  (SLURM_STEP_TASKS_PER_NODE);
- GPUs: gpus_per_task = gpus_per_node // (the most tasks on one node); the k-th task of a node sees GPUs
  k*gpus_per_task ... (k+1)*gpus_per_task - 1 (CUDA_VISIBLE_DEVICES). `[slurm] gpus_per_task` sets the
  share itself (a divisor of gpus_per_node, orchestrator.config.rules), the same way.
Slurm alone places ranks by the CPUs it allocated (7 tasks on 3 nodes of 4 CPUs: 4, 2, 1), so tfcluster
decides the tasks per node itself, `spread`: evenly, the first nodes in the resolver's order taking one more
(4 tasks on 3 nodes: 2, 1, 1), and has Slurm place every rank there (`--distribution=arbitrary` with
SLURM_HOSTFILE, orchestrator.plan.sbatch); the resolver reading such a step's environment finds the same
job -> node layout (tests/integration/test_slurm_resolver.py).

Where tfcluster keeps its own rules (DESIGN.md "Plan rules"): ports are unique across the whole job from
`base_port` (the resolver gives port_base + k on every node, but TF's gRPC server listens on every
interface and several nodes may be one machine: the three test nodes are); ps tasks and the in-graph or
parameter-server-strategy client run on the CPU (CUDA_VISIBLE_DEVICES="") and leave their slot's GPUs idle.

Before the allocation exists the machines are node indexes: host `<node-K>` dialled at `<node-K-addr>`,
placeholders that the exported script replaces with the K-th node's name and NodeAddr. After it,
`plan_slurm(valid, nodes=...)` takes the nodes' names and NodeAddr (`scontrol show node -o`), so node names
need not resolve; each node is a HostPlan (address: its Slurm name, dial_address: its NodeAddr).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.config.modes import CLIENT_CHIEF_MODES
from orchestrator.config.rules import slurm_gpus_per_task
from orchestrator.config.schema import Config
from orchestrator.config.slurm_schema import SlurmSection
from orchestrator.config.validate import ValidConfig, idle_gpus
from orchestrator.plan.build import Machine, Slot, Slots, assemble_plan
from orchestrator.plan.model import JOB_ORDER, ClusterPlan, Job, TaskPlan

NODE_NAME = "<node-{}>"  # placeholders before the allocation: replaced by the K-th node's name ...
NODE_ADDR = "<node-{}-addr>"  # ... and its NodeAddr (orchestrator.plan.slurm_rank)


def before_allocation(plan: ClusterPlan) -> bool:
    """A [slurm] run's plan still in node indexes: its job has no nodes yet (or never got them)."""
    return any(h.name.startswith(NODE_NAME.split("{", 1)[0]) for h in plan.hosts)


@dataclass(frozen=True)
class SlurmNode:
    name: str  # Slurm's node name (it need not resolve)
    address: str  # its NodeAddr: where the other tasks dial it


@dataclass(frozen=True)
class SlurmPlan:
    plan: ClusterPlan
    slurm: SlurmSection
    nodes: tuple[SlurmNode, ...]  # in the resolver's order; placeholders until the allocation exists
    tasks_per_node: tuple[int, ...]  # in that order
    gpus_per_task: int
    allocated: bool

    @property
    def ranks(self) -> tuple[TaskPlan, ...]:
        """The tasks in rank order (SLURM_PROCID): the plan lists them in JOB_ORDER, as the resolver ranks."""
        return self.plan.tasks

    def node_of_rank(self, rank: int) -> int:
        """The index (in `nodes`) of the node that runs rank `rank`."""
        start = 0
        for index, count in enumerate(self.tasks_per_node):
            if rank < start + count:
                return index
            start += count
        raise IndexError(f"rank {rank} is beyond the job's {start} tasks")

    def layout(self) -> list[tuple[SlurmNode, list[TaskPlan]]]:
        """Each node with its tasks, in rank order."""
        by_node: list[tuple[SlurmNode, list[TaskPlan]]] = [(node, []) for node in self.nodes]
        for rank, task in enumerate(self.ranks):
            by_node[self.node_of_rank(rank)][1].append(task)
        return by_node

    def to_json(self) -> dict[str, Any]:
        return {
            "allocated": self.allocated,
            "nodes": [{"index": i, "name": n.name, "address": n.address, "tasks": [t.name for t in tasks]}
                      for i, (n, tasks) in enumerate(self.layout())],
            "tasks_per_node": list(self.tasks_per_node),
            "gpus_per_task": self.gpus_per_task,
            "ranks": [{"rank": r, "task": t.name, "node": self.node_of_rank(r)} for r, t in enumerate(self.ranks)],
        }


def spread(tasks: int, nodes: int) -> tuple[int, ...]:
    """Tasks per node: as even as it gets, the first nodes taking one more (4 on 3 nodes: 2, 1, 1)."""
    share, extra = divmod(tasks, nodes)
    return tuple(share + 1 if i < extra else share for i in range(nodes))


def plan_slurm(valid: ValidConfig, nodes: Sequence[SlurmNode] | None = None) -> SlurmPlan:
    """The job's plan: in node indexes (placeholders) without `nodes`, else on those nodes (any order: they
    are sorted by name, as the resolver sorts them). Its counts held against the nodes and GPUs by
    orchestrator.config.rules."""
    config, slurm = valid.config, valid.config.slurm
    assert slurm is not None, "validated for a [slurm] job"
    counts: dict[Job, int] = dict(valid.tasks.jobs)
    per_node = spread(sum(counts.values()), slurm.nodes)
    gpus_per_task = slurm_gpus_per_task(slurm, max(per_node))
    if nodes is None:
        placed = tuple(SlurmNode(NODE_NAME.format(i), NODE_ADDR.format(i)) for i in range(slurm.nodes))
    elif len(nodes) != slurm.nodes:
        raise ValueError(f"the allocation has {len(nodes)} nodes, the plan {slurm.nodes}")
    else:
        placed = tuple(sorted(nodes, key=lambda n: n.name))
    slots, roles = _resolver_slots(config, counts, per_node, gpus_per_task, len(placed))
    machines = [
        Machine(name=node.name, address=node.name, dial_address=node.address, transport="ssh",
                python=config.remote.python, workdir=config.remote.workdir, ssh=config.ssh,
                roles=tuple(roles[i]), env={})
        for i, node in enumerate(placed)
    ]
    slots_on: Slots = {job: [Slot(machines[i], gpus) for i, gpus in placed_slots]
                       for job, placed_slots in slots.items()}
    warnings = (*valid.warnings, *_gpu_warnings(slurm, per_node, gpus_per_task))
    if idle := idle_gpus(config, gpus_per_task):
        warnings = (*warnings, f"slurm: {idle}")
    plan = assemble_plan(valid, machines, slots_on, warnings)
    return SlurmPlan(plan=plan, slurm=slurm, nodes=placed, tasks_per_node=per_node,
                     gpus_per_task=gpus_per_task, allocated=nodes is not None)


def _resolver_slots(
    config: Config, counts: dict[Job, int], per_node: tuple[int, ...], gpus_per_task: int, node_count: int
) -> tuple[dict[Job, list[tuple[int, tuple[int, ...]]]], list[list[str]]]:
    """Each job's tasks as (node index, GPUs), ranked and placed as the resolver does; each node's jobs."""
    mode = config.cluster.mode
    slots: dict[Job, list[tuple[int, tuple[int, ...]]]] = {job: [] for job in JOB_ORDER}
    roles: list[list[str]] = [[] for _ in range(node_count)]
    node, local = 0, 0
    for job in JOB_ORDER:
        for _ in range(counts[job]):
            while local == per_node[node]:
                node, local = node + 1, 0
            on_cpu = job == "ps" or (job == "chief" and mode in CLIENT_CHIEF_MODES)
            first = local * gpus_per_task
            gpus = () if on_cpu else tuple(range(first, first + gpus_per_task))
            slots[job].append((node, gpus))
            if job not in roles[node]:
                roles[node].append(job)
            local += 1
    return slots, roles


def _gpu_warnings(slurm: SlurmSection, per_node: tuple[int, ...], gpus_per_task: int) -> list[str]:
    idle = slurm.gpus_per_node - max(per_node) * gpus_per_task
    if slurm.gpus_per_node and idle:
        return [f"slurm: gpus_per_node = {slurm.gpus_per_node} with up to {max(per_node)} tasks on a node: each "
                f"task gets {gpus_per_task}, and {idle} GPU(s) of the busiest nodes stay idle"]
    return []
