"""The bench: every cell of a BenchSpec, one after the other, into one BenchReport.

Before anything starts: hosts.toml is read and planned (a bad file is one line with its line number, exit
2), every cell is planned by the real planner (a setting that fails every cell, e.g. a bad --model-arg,
is one line and exit 2; a cell that alone cannot be planned is recorded failed), and the link a PS
uses is measured when asked (orchestrator/bench/nic.py). Then each cell runs (orchestrator/bench/cell_run.py);
a failed cell is recorded with its error and the bench goes on; Ctrl-C stops the running cell's cluster
and ends the bench with the finished cells kept (`report.interrupted`).

No UI: progress goes through a `BenchListener` (the CLI draws Rich bars from it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from orchestrator.bench.cell_run import PhaseFn, run_cell
from orchestrator.bench.cells import Cell, cell_plan, cells, grown_plan, listed_workers
from orchestrator.bench.nic import LinkMeasurement, Method, measure_link
from orchestrator.bench.report import BenchReport, CellResult, machine_now
from orchestrator.bench.scaling import nic_capacity_Bps
from orchestrator.bench.spec import BenchSpec, check_spec
from orchestrator.config.load import read_config
from orchestrator.errors import ConfigError, TfclusterError, UsageError
from orchestrator.plan.from_file import any_plan_file, plan_config
from orchestrator.plan.model import ClusterPlan
from orchestrator.plan.slurm import SlurmPlan

LINK_SECONDS = 3.0


class BenchListener(Protocol):
    def planned(self, cells: list[Cell]) -> None: ...

    def note(self, text: str) -> None: ...

    def cell_started(self, index: int, cell: Cell) -> None: ...

    def cell_phase(self, cell: Cell, phase: str, done: float, total: float) -> None: ...

    def cell_finished(self, index: int, result: CellResult) -> None: ...


class SilentListener:
    def planned(self, cells: list[Cell]) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def cell_started(self, index: int, cell: Cell) -> None:
        pass

    def cell_phase(self, cell: Cell, phase: str, done: float, total: float) -> None:
        pass

    def cell_finished(self, index: int, result: CellResult) -> None:
        pass


def plan_cells(spec: BenchSpec) -> tuple[str, list[tuple[Cell, ClusterPlan | ConfigError]], ClusterPlan]:
    """The cluster's name, each cell with its plan (or why it has none), and hosts.toml's own plan."""
    planned_file = any_plan_file(spec.hosts_file)  # the file's errors, with its lines
    base_plan = planned_file.plan if isinstance(planned_file, SlurmPlan) else planned_file
    config, _ = read_config(spec.hosts_file)
    check_spec(spec)
    if config.slurm is not None and spec.measure_nic:
        raise UsageError("--measure-nic measures the link between two hosts; a [slurm] job's nodes are known only "
                         "once it runs: give --nic-gbps")
    planned: list[tuple[Cell, ClusterPlan | ConfigError]] = []
    for cell in cells(spec, config):
        try:
            plan = cell_plan(spec, config, cell)
            if cell.variant == "resize":
                grown_plan(spec, config, cell)  # the worker that joins: its errors before anything starts
            planned.append((cell, plan))
        except ConfigError as exc:
            planned.append((cell, exc))
    if spec.resize is not None and not any(c.variant == "resize" for c, _ in planned):
        raise UsageError(f"--resize: every cell already runs all {listed_workers(config)} worker(s) {spec.hosts_file} "
                         "lists: leave one to join (e.g. --workers 1)")
    errors = [p for _, p in planned if isinstance(p, ConfigError)]
    if planned and len(errors) == len(planned):
        raise UsageError(f"no cell of this bench can be planned: {errors[0].one_line()}")
    return config.cluster.name, planned, base_plan


def link_plan(spec: BenchSpec, base: ClusterPlan) -> ClusterPlan:
    """A plan with a ps and a worker for the link probe: hosts.toml's, in between-graph mode if need be."""
    if any(t.job == "ps" for t in base.tasks):
        return base
    config, _ = read_config(spec.hosts_file)
    return plan_config(config.model_copy(update={"cluster": config.cluster.model_copy(
        update={"mode": "between-graph"})}), spec.hosts_file)


def measure_links(spec: BenchSpec, base: ClusterPlan, listener: BenchListener,
                  measure: Callable[[ClusterPlan, Method, float], LinkMeasurement] = measure_link,
                  ) -> list[LinkMeasurement]:
    plan = link_plan(spec, base)
    out = []
    methods: tuple[Method, ...] = ("tcp", "tf-grpc")
    for method in methods:
        listener.note(f"measuring the link ps:0 ↔ worker:0 ({method}, {LINK_SECONDS:g} s both ways)")
        out.append(measure(plan, method, LINK_SECONDS))
    return out


def link_section(spec: BenchSpec, measured: list[LinkMeasurement]) -> dict[str, object]:
    """The capacity the scaling model uses: TensorFlow's own transfer when measured, else --nic-gbps."""
    tf = next((m for m in measured if m.method == "tf-grpc"), None)
    if tf is not None:
        return {"source": "measured (tf-grpc)", "nic_gbps": tf.gbps_each_way, "capacity_Bps": tf.both_ways_Bps,
                "measurements": [m.to_json() for m in measured]}
    return {"source": "--nic-gbps", "nic_gbps": spec.nic_gbps, "capacity_Bps": nic_capacity_Bps(spec.nic_gbps),
            "measurements": []}


def _phases(listener: BenchListener, cell: Cell) -> PhaseFn:
    def phase(name: str, done: float, total: float) -> None:
        listener.cell_phase(cell, name, done, total)

    return phase


def run_bench(spec: BenchSpec, listener: BenchListener | None = None) -> BenchReport:
    listener = listener or SilentListener()
    cluster, planned, base = plan_cells(spec)
    machine = machine_now("load_before")
    measured: list[LinkMeasurement] = []
    report = BenchReport(spec.hosts_file, cluster, spec.to_json(), {}, machine=machine)
    listener.planned([c for c, _ in planned])
    try:
        if spec.measure_nic:
            measured = measure_links(spec, base, listener)
    except KeyboardInterrupt:
        report.interrupted = True
    except TfclusterError as exc:
        raise UsageError(f"--measure-nic: {exc.one_line()}") from None
    report.link = link_section(spec, measured)
    try:
        for index, (cell, plan) in enumerate(planned):
            if report.interrupted:
                break
            listener.cell_started(index, cell)
            if isinstance(plan, ConfigError):
                result, interrupted = CellResult(cell, error=plan.one_line(), started=time.time()), False
            else:
                result, interrupted = run_cell(spec, cell, plan, report.capacity_Bps, _phases(listener, cell))
            report.cells.append(result)
            report.interrupted = interrupted
            listener.cell_finished(index, result)
    except KeyboardInterrupt:  # between cells: nothing is running, the finished cells stand
        report.interrupted = True
    report.machine.update(machine_now("load_after"))
    return report
