"""Accounted parameter-server traffic: bytes a task pulls from and pushes to each PS task per step.

Stdlib only. The rule (documented in DESIGN.md's `progress` event): every step reads each variable once
from the PS task that holds it and sends one gradient for each trainable variable back to it. In-graph
clients that read a variable once per tower pass `pulls_per_step` accordingly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_PS_DEVICE = re.compile(r"/job:(?P<job>[A-Za-z_]+)/(?:replica:\d+/)?task:(?P<task>\d+)")


@dataclass(frozen=True)
class PlacedVariable:
    name: str
    device: str  # e.g. /job:ps/task:1/device:CPU:0 (what the graph requested)
    nbytes: int
    trainable: bool = True


def ps_task_of(device: str) -> str | None:
    """'/job:ps/task:1/device:CPU:0' -> 'ps-1'; None for a device that is not on a ps task."""
    m = _PS_DEVICE.search(device or "")
    if m is None or m.group("job") != "ps":
        return None
    return f"ps-{int(m.group('task'))}"


def ps_bytes_per_step(variables: Iterable[PlacedVariable], pulls_per_step: int = 1,
                      pushes_per_step: int = 1) -> dict[str, dict[str, int]]:
    """{"ps-0": {"pulled": n, "pushed": m}, ...} for one training step; variables off the PS are ignored."""
    out: dict[str, dict[str, int]] = {}
    for var in variables:
        ps = ps_task_of(var.device)
        if ps is None:
            continue
        entry = out.setdefault(ps, {"pulled": 0, "pushed": 0})
        entry["pulled"] += var.nbytes * pulls_per_step
        if var.trainable:
            entry["pushed"] += var.nbytes * pushes_per_step
    return dict(sorted(out.items(), key=lambda kv: int(kv[0].split("-")[1])))


def scale(per_step: dict[str, dict[str, int]], steps: int) -> dict[str, dict[str, int]]:
    return {ps: {k: v * steps for k, v in d.items()} for ps, d in per_step.items()}
