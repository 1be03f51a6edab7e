"""`tfcluster bench HOSTS`: which replication mode is fastest on these machines, with numbers and plots.

Thin: the bench is orchestrator.bench (cells, runner, scaling model, report schema); the drawing is
tfcluster.bench_report (Rich progress, tables and bar charts, matplotlib PNGs).

    tfcluster bench hosts.toml [--modes all] [--workers 1,2,4] [--seconds 30 | --steps N]
                    [--straggler worker:1=4 [--pace 5]] [--kill worker:1@30s] [--resize | --resize-at 10s]
                    [--repeat 3]
                    [--nic-gbps 10 | --measure-nic] [--out DIR]
    tfcluster bench --report DIR/bench.json [--out DIR]   # redraw a report
    tfcluster bench --compare a.json b.json               # side by side, with ratios

Exit 0 when every cell finished, 1 when some failed, 130 after Ctrl-C (the finished cells are written).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.bench.spec import DEFAULT_NIC_GBPS, DEFAULT_SECONDS, DEFAULT_TARGET_LOSS
from tfcluster.common import console, widen

if TYPE_CHECKING:
    from orchestrator.bench.report import BenchReport

MIN_WIDTH = 200
REPORT_NAME = "bench.json"


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)


def bench(
    hosts_file: Annotated[Path | None, typer.Argument(help="The cluster description (see hosts.example.toml).")] = None,
    modes: Annotated[str, typer.Option(help="Comma-separated modes, or all.")] = "all",
    workers: Annotated[str | None, typer.Option(help="Worker counts, e.g. 1,2,4: the first N workers listed "
                                                "(default 1, 2, 4, ... and all).")] = None,
    model: Annotated[str | None, typer.Option(help="Built-in model (default: hosts.toml's).")] = None,
    model_arg: Annotated[list[str] | None, typer.Option("--model-arg", help="KEY=VALUE, repeatable, e.g. "
                                                        "params=20000000.")] = None,
    batch_size: Annotated[int | None, typer.Option(min=1, help="Per worker (default: hosts.toml's).")] = None,
    seconds: Annotated[float, typer.Option(min=1, help="Measured seconds per cell, after the warm-up.")]
    = DEFAULT_SECONDS,
    steps: Annotated[int | None, typer.Option(min=1, help="Run each cell to this global step instead.")] = None,
    warmup: Annotated[float, typer.Option(min=0, help="Seconds discarded after every trainer's first step.")] = 5.0,
    straggler: Annotated[str | None, typer.Option(help="TASK=FACTOR, e.g. worker:1=4: also run every cell with "
                                                  "that task slowed ([training] slowdown).")] = None,
    pace: Annotated[float, typer.Option(min=1, help="Every trainer at this slowdown (the straggler at pace × "
                                        "factor): idle time in each step, as on a device-bound machine.")] = 1.0,
    kill: Annotated[str | None, typer.Option(help="TASK@TIME, e.g. worker:1@30s: also run every cell with that "
                                             "task SIGKILLed that far into its measurement.")] = None,
    resize: Annotated[bool, typer.Option("--resize", help="Also run every cell that leaves a listed worker out "
                                         "with that worker joining, then leaving, through `tfcluster resize`'s "
                                         "machinery: the seconds without a global step and the steps lost.")]
    = False,
    resize_at: Annotated[str | None, typer.Option(help="TIME, e.g. 10s (implies --resize): the join this far into "
                                                  "the measurement, the leave this long after the joined worker "
                                                  "stepped, the end this long after the leave (default: a third "
                                                  "of --seconds).")] = None,
    repeat: Annotated[int, typer.Option(min=1, help="Runs of every cell, interleaved.")] = 1,
    nic_gbps: Annotated[float, typer.Option(min=0.001, help="The PS hosts' NIC, Gb/s each way, for the "
                                            "PS-bandwidth ceiling.")] = DEFAULT_NIC_GBPS,
    measure_nic: Annotated[bool, typer.Option("--measure-nic", help="Measure the ps:0 ↔ worker:0 link instead "
                                              "(TCP and TensorFlow's gRPC, both ways at once).")] = False,
    target_loss: Annotated[float, typer.Option(help="Time-to-loss target (mlp).")] = DEFAULT_TARGET_LOSS,
    cell_timeout: Annotated[float, typer.Option(min=10, help="Seconds for a cell to start and take its first "
                                                "steps.")] = 240.0,
    out: Annotated[Path | None, typer.Option(help="Directory for bench.json and the PNGs "
                                             "(default ./bench-<cluster>-<time>).")] = None,
    report: Annotated[Path | None, typer.Option("--report", help="Redraw this report instead of running.")] = None,
    compare: Annotated[tuple[Path, Path] | None, typer.Option("--compare", help="Two reports side by side.")]
    = None,
) -> None:
    """Run every mode on these machines (plan, start, measure, stop per cell) and report which is fastest."""
    from orchestrator.bench import report as bench_report
    from orchestrator.bench.runner import run_bench
    from orchestrator.bench.spec import (
        BenchSpec,
        parse_kill,
        parse_model_args,
        parse_modes,
        parse_resize,
        parse_straggler,
        parse_workers,
    )
    from orchestrator.errors import UsageError
    from tfcluster import exit_codes
    from tfcluster.bench_report.progress import RichBenchListener

    if compare is not None:
        _compare(*compare)
        return
    if report is not None:
        loaded = bench_report.load(report)
        _show(loaded, out or report.parent, write_json=False)
        return
    if hosts_file is None:
        raise UsageError("bench: give the hosts file to measure, or --report FILE, or --compare A B")
    spec = BenchSpec(
        hosts_file=str(hosts_file), modes=parse_modes(modes), workers=parse_workers(workers) if workers else None,
        model=model, model_args=parse_model_args(model_arg or []), batch_size=batch_size, steps=steps,
        seconds=seconds, warmup_s=warmup, straggler=parse_straggler(straggler) if straggler else None, pace=pace,
        kill=parse_kill(kill) if kill else None, resize=parse_resize(resize, resize_at, seconds), repeat=repeat,
        nic_gbps=nic_gbps, measure_nic=measure_nic, target_loss=target_loss, cell_timeout=cell_timeout,
    )
    err = console(stderr=True)
    with RichBenchListener(err, spec) as listener:
        result = run_bench(spec, listener)
    directory = out or Path(f"bench-{result.cluster}-{time.strftime('%Y%m%d-%H%M%S')}")
    _show(result, directory, write_json=True)
    if result.interrupted:
        err.print("interrupted: the finished cells are in the report")
        raise typer.Exit(130)
    if not result.cells or any(not c.ok for c in result.cells):
        raise typer.Exit(exit_codes.FAILED)


def _show(result: BenchReport, directory: Path, *, write_json: bool) -> None:
    from rich.markup import escape

    from orchestrator.bench import report as bench_report
    from orchestrator.bench.answers import scaling, straggler_label, straggler_shares
    from orchestrator.bench.summary import rows
    from tfcluster.bench_report.tables import print_report
    from tfcluster.bench_report.terminal_charts import scaling_chart, straggler_chart

    written = []
    if write_json:
        written.append(bench_report.save(result, directory / REPORT_NAME))
    from tfcluster.bench_report.plots import build_figures, save_figures  # matplotlib: only when drawing

    written += save_figures(build_figures(result), directory)
    wide = widen(console(), MIN_WIDTH)
    print_report(wide, result)
    wide.print(scaling_chart(scaling([r for r in rows(result) if r.ok])))
    straggler, shares = straggler_label(result), straggler_shares(result)
    if straggler is not None and shares:
        wide.print(straggler_chart(shares, straggler))
    wide.print("wrote " + ", ".join(escape(str(p)) for p in written), soft_wrap=True)


def _compare(a: Path, b: Path) -> None:
    from orchestrator.bench import report as bench_report
    from tfcluster.bench_report.tables import compare_table

    ra, rb = bench_report.load(a), bench_report.load(b)
    widen(console(), MIN_WIDTH).print(compare_table(ra, rb, str(a), str(b)))
