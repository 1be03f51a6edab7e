"""Where the in-graph client's towers go: one per worker task of the plan, or one per GPU of a worker the
plan gives several (it sees its CUDA_VISIBLE_DEVICES as GPU:0 ... GPU:M-1), each with its straggler factor.
Pure: no TensorFlow."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..cluster.straggler import slowdown_factor


@dataclass(frozen=True)
class Tower:
    index: int  # the worker task it runs on
    device: str  # where its compute is placed (the plan's TaskPlan.device, or that worker's GPU:k)
    slowdown: float = 1.0
    gpu: int | None = None  # k of its worker's GPU:k when the worker has several GPUs, else None

    @property
    def task(self) -> str:
        return f"worker-{self.index}"  # as TaskPlan.name's file stem and the ps_bytes keys

    @property
    def name(self) -> str:
        return self.task if self.gpu is None else f"{self.task}-gpu{self.gpu}"

    @property
    def scope(self) -> str:
        return f"tower_{self.index}" if self.gpu is None else f"tower_{self.index}_gpu{self.gpu}"


def worker_devices(task: Mapping[str, Any]) -> list[str]:
    """Where a worker task of the plan computes: its device, or with several GPUs each of them, GPU:0 ...
    GPU:M-1 (its CUDA_VISIBLE_DEVICES, as the task sees them)."""
    device, count = str(task["device"]), len(task.get("gpus") or ())
    if count <= 1:
        return [device]
    prefix = device.rpartition(":")[0]  # /job:worker/task:N/device:GPU
    return [f"{prefix}:{k}" for k in range(count)]


def towers_from_plan(plan: Mapping[str, Any]) -> list[Tower]:
    """One tower per device of each worker task of the plan (ClusterPlan.to_json()), in task order."""
    slowdown = plan.get("training", {}).get("slowdown") or {}
    workers = sorted((t for t in plan["tasks"] if t["job"] == "worker"), key=lambda t: int(t["index"]))
    if not workers:
        raise ValueError("in-graph plan has no worker task to place a tower on")
    towers: list[Tower] = []
    for t in workers:
        index, devices = int(t["index"]), worker_devices(t)
        factor = slowdown_factor(slowdown, "worker", index)
        towers.extend(Tower(index, device, factor, k if len(devices) > 1 else None)
                      for k, device in enumerate(devices))
    return towers
