"""Synthetic bench reports for the report, plot and CLI tests: raw samples with known rates folded by the
product's own figures code (orchestrator.bench.measures), never hand-written figures."""

from __future__ import annotations

from orchestrator.bench.cells import Cell, Variant
from orchestrator.bench.measures import Window, cell_figures
from orchestrator.bench.report import BenchReport, CellResult
from orchestrator.bench.samples import CellSamples, HostSample, ProgressSample
from orchestrator.config.modes import Mode

T0 = 1_000.0
BATCH = 32
PS_BYTES = 100_000  # per step, each way


def _series(task: str, rate: float, seconds: int, coordinator: bool = False) -> list[ProgressSample]:
    return [ProgressSample(T0 + i, task, round(rate * i), round(rate * i), round(rate * i) * BATCH, 2.0 / (1 + i / 3),
                           1.0, {} if coordinator else {"ps:0": (round(rate) * PS_BYTES, round(rate) * PS_BYTES)},
                           coordinator)
            for i in range(seconds + 1)]


def cell_result(mode: Mode, workers: int, variant: Variant, rates: list[float], repeat: int = 0,
                seconds: int = 10) -> CellResult:
    """A finished cell whose workers stepped at `rates` (in-graph: the client at rates[0])."""
    progress: list[ProgressSample] = []
    cpu: dict[str, float] = {}
    if mode == "in-graph":
        progress += _series("chief:0", rates[0], seconds)
        cpu = {"chief:0": 0.6, **{f"worker:{i}": 0.3 for i in range(workers)}}
    else:
        for i, rate in enumerate(rates):
            progress += _series(f"worker:{i}", rate, seconds)
    total = rates[0] if mode == "in-graph" else sum(rates)
    ps_rate = 2 * total * PS_BYTES * 1.03  # the kernel sees a little more than the variables (headers)
    hosts = [HostSample(T0 + i, "m0", 40.0, {"ps:0": (int(ps_rate / 2 * i), int(ps_rate / 2 * i))},
                        {t: r * i for t, r in cpu.items()}) for i in range(seconds + 1)]
    samples = CellSamples(sorted(progress, key=lambda p: p.t), hosts, [])
    window = Window(T0 + 1, T0 + seconds)
    figures = cell_figures(samples, window, mode, [] if mode == "multi-worker-mirrored" else ["ps:0"], 0.6)
    ceiling = None if mode == "multi-worker-mirrored" else {
        "steps_per_s_per_worker": 2.5e9 / (2 * workers * 400_000), "busiest_ps": "ps:0",
        "bytes_on_ps": {"ps:0": 400_000}, "transfers_per_step": 2.0 * workers}
    return CellResult(Cell(mode, workers, variant, repeat), "ok", started=T0, wall_s=seconds + 5.0,
                      window=(window.start, window.end),
                      cluster={"model": "mlp", "trainers": [f"worker:{i}" for i in range(workers)]},
                      figures=figures, ceiling=ceiling, stopped_clean=True, samples=samples)


def sample_report(scale: float = 1.0) -> BenchReport:
    """between-graph and in-graph at 1 and 2 workers, with and without a 4x straggler on worker:1, a
    multi-worker-mirrored cell, and one failed cell."""
    report = BenchReport("hosts.toml", "test", {
        "straggler": {"task": {"job": "worker", "index": 1}, "factor": 4.0}, "target_loss": 0.6},
        {"source": "--nic-gbps", "nic_gbps": 10.0, "capacity_Bps": 2.5e9, "measurements": []},
        machine={"cpus": 2, "load_before": [0.5, 0.5, 0.5], "load_after": [1.0, 0.8, 0.6]})
    s = scale
    report.cells = [
        cell_result("between-graph", 1, "baseline", [100 * s]),
        cell_result("between-graph", 2, "baseline", [90 * s, 90 * s]),
        cell_result("between-graph", 2, "straggler", [95 * s, 22 * s]),
        cell_result("in-graph", 1, "baseline", [60 * s]),
        cell_result("in-graph", 2, "baseline", [50 * s]),
        cell_result("in-graph", 2, "straggler", [12 * s]),
        cell_result("multi-worker-mirrored", 2, "baseline", [120 * s, 120 * s]),
        CellResult(Cell("parameter-server-strategy", 2, "baseline", 0), "failed", "host m1: lost: connection reset"),
    ]
    return report
