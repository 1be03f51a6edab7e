"""The bench report file: a versioned JSON schema, every raw sample kept, one typed decoder.

    {"schema": "tfcluster-bench", "version": 1, "created": unix time, "hosts_file": ..., "cluster": ...,
     "spec": BenchSpec, "machine": {"cpus", "load_before": [1, 5, 15 min], "load_after": [...]},
     "link": {"source": "--nic-gbps" | "measured", "nic_gbps": N, "capacity_Bps": bytes/s in+out,
              "measurements": [LinkMeasurement, ...]},
     "interrupted": bool,
     "cells": [{"cell": {mode, workers, variant: baseline | straggler | kill | resize, repeat},
                "status": "ok" | "failed" | "interrupted",
                "error": str | null, "run_id", "started", "wall_s", "window": [start, end] | null,
                "cluster": {"trainers", "ps", "batch_size", "model", "model_args", "slowdown", "checkpoint_every"},
                "figures": CellFigures | null (a resize cell's has "resize": its join and leave, resize_figures.py),
                "ceiling": PsCeiling | null, "stopped_clean": bool | null, "samples": CellSamples}]}

`load(path)` raises ReportError (one line naming the file, exit 2) for anything else. A newer version
than this code knows is refused rather than misread. Reports written before tasks had one name keyed the
figures by file stem (`worker-0`); the decoder reads those keys as task names (`worker:0`).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args

from orchestrator.bench.cells import Cell, Variant
from orchestrator.bench.measures import CellFigures, PsFigures
from orchestrator.bench.samples import CellSamples
from orchestrator.config.modes import Mode
from orchestrator.errors import UsageError
from orchestrator.plan.names import name_of_stem

SCHEMA = "tfcluster-bench"
SCHEMA_VERSION = 1
CellStatus = Literal["ok", "failed", "interrupted"]


class ReportError(UsageError):
    """A report file that cannot be read as a tfcluster bench report."""


@dataclass
class CellResult:
    cell: Cell
    status: CellStatus = "failed"
    error: str | None = None
    run_id: str | None = None
    started: float = 0.0
    wall_s: float = 0.0
    window: tuple[float, float] | None = None
    cluster: dict[str, Any] = field(default_factory=dict)
    figures: CellFigures | None = None
    ceiling: dict[str, Any] | None = None  # scaling.PsCeiling.to_json() at the bench's link capacity
    stopped_clean: bool | None = None  # the stop verified nothing of the run was left
    samples: CellSamples = field(default_factory=CellSamples)

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.figures is not None

    def to_json(self) -> dict[str, Any]:
        return {"cell": self.cell.to_json(), "status": self.status, "error": self.error, "run_id": self.run_id,
                "started": self.started, "wall_s": round(self.wall_s, 3),
                "window": None if self.window is None else list(self.window), "cluster": self.cluster,
                "figures": None if self.figures is None else self.figures.to_json(), "ceiling": self.ceiling,
                "stopped_clean": self.stopped_clean, "samples": self.samples.to_json()}


@dataclass
class BenchReport:
    hosts_file: str
    cluster: str
    spec: dict[str, Any]
    link: dict[str, Any]
    created: float = field(default_factory=time.time)
    machine: dict[str, Any] = field(default_factory=dict)
    cells: list[CellResult] = field(default_factory=list)
    interrupted: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "version": SCHEMA_VERSION, "created": self.created, "hosts_file": self.hosts_file,
                "cluster": self.cluster, "spec": self.spec, "machine": self.machine, "link": self.link,
                "interrupted": self.interrupted, "cells": [c.to_json() for c in self.cells]}

    @property
    def capacity_Bps(self) -> float:
        return float(self.link.get("capacity_Bps") or 0.0)


def machine_now(key: str) -> dict[str, Any]:
    return {"cpus": os.cpu_count(), key: [round(x, 2) for x in os.getloadavg()]}


def save(report: BenchReport, path: Path) -> Path:
    """Atomically (a reader never sees half a report)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report.to_json(), indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def load(path: Path) -> BenchReport:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReportError(f"{path}: no such report file") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ReportError(f"{path}: not a JSON bench report ({type(exc).__name__})") from None
    try:
        return from_json(data)
    except ReportError as exc:
        raise ReportError(f"{path}: {exc}") from None
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ReportError(f"{path}: not a tfcluster bench report ({type(exc).__name__}: {str(exc)[:120]})") from None


def from_json(data: object) -> BenchReport:
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ReportError(f"not a tfcluster bench report (no \"schema\": \"{SCHEMA}\")")
    version = data.get("version")
    if not isinstance(version, int) or version > SCHEMA_VERSION or version < 1:
        raise ReportError(f"report version {version!r}; this tfcluster reads version {SCHEMA_VERSION}")
    return BenchReport(
        hosts_file=str(data["hosts_file"]), cluster=str(data["cluster"]), spec=dict(data["spec"]),
        link=dict(data["link"]), created=float(data["created"]), machine=dict(data.get("machine", {})),
        cells=[_cell_result(c) for c in data["cells"]], interrupted=bool(data.get("interrupted", False)),
    )


def _cell(raw: dict[str, Any]) -> Cell:
    mode, variant = raw["mode"], raw["variant"]
    if mode not in get_args(Mode) or variant not in get_args(Variant):
        raise ReportError(f"unknown cell {mode!r}/{variant!r}")
    return Cell(cast(Mode, mode), int(raw["workers"]), cast(Variant, variant), int(raw["repeat"]))


def _figures(raw: dict[str, Any] | None) -> CellFigures | None:
    if raw is None:
        return None
    ps = {k: PsFigures(v["measured_in_Bps"], v["measured_out_Bps"], v["accounted_in_Bps"], v["accounted_out_Bps"])
          for k, v in _named(raw["ps"]).items()}
    kill = raw.get("kill")
    return CellFigures(
        window_s=float(raw["window_s"]), examples_per_s=raw["examples_per_s"], updates_per_s=raw["updates_per_s"],
        steps_per_s={k: float(v) for k, v in _named(raw["steps_per_s"]).items()},
        per_worker_steps_per_s={k: float(v) for k, v in _named(raw["per_worker_steps_per_s"]).items()},
        cpu_pct={k: float(v) for k, v in _named(raw["cpu_pct"]).items()}, ps=ps,
        loss_curve=[(float(t), float(v)) for t, v in raw["loss_curve"]],
        time_to_target_loss_s=raw["time_to_target_loss_s"], client_cpu_pct=raw["client_cpu_pct"],
        kill=None if kill is None else {**kill, "task": name_of_stem(str(kill["task"]))},
        resize=raw.get("resize"),  # (absent from reports before the resize variant)
    )


def _named(by_task: dict[str, Any]) -> dict[str, Any]:
    return {name_of_stem(str(k)): v for k, v in dict(by_task).items()}


def _ceiling(raw: dict[str, Any] | None) -> dict[str, Any] | None:
    if raw is None or "busiest_ps" not in raw:
        return raw
    return {**raw, "busiest_ps": name_of_stem(str(raw["busiest_ps"])), "bytes_on_ps": _named(raw["bytes_on_ps"])}


def _cell_result(raw: dict[str, Any]) -> CellResult:
    status = raw["status"]
    if status not in get_args(CellStatus):
        raise ReportError(f"unknown cell status {status!r}")
    window = raw.get("window")
    return CellResult(
        cell=_cell(raw["cell"]), status=cast(CellStatus, status), error=raw.get("error"), run_id=raw.get("run_id"),
        started=float(raw.get("started", 0.0)), wall_s=float(raw.get("wall_s", 0.0)),
        window=None if window is None else (float(window[0]), float(window[1])), cluster=dict(raw.get("cluster", {})),
        figures=_figures(raw.get("figures")), ceiling=_ceiling(raw.get("ceiling")), stopped_clean=raw.get("stopped_clean"),
        samples=CellSamples.from_json(raw.get("samples", {})),
    )
