"""`tfcluster bench --resize`: the options, the cells, the figures from synthetic progress samples (a live
join, a stall, a restart that loses steps, a run that never steps again), the report round trip (old
reports still read), and the table and the plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.bench import report as bench_report
from orchestrator.bench.cells import Cell, cell_config, cell_plan, cells, grown_plan
from orchestrator.bench.measures import Window, cell_figures
from orchestrator.bench.report import BenchReport, CellResult
from orchestrator.bench.resize_figures import ResizeMark, resize_figures, stall, steps_lost
from orchestrator.bench.runner import plan_cells
from orchestrator.bench.samples import CellSamples, ProgressSample
from orchestrator.bench.spec import BenchSpec, ResizeAt, check_spec, parse_resize
from orchestrator.bench.summary import resize_events
from orchestrator.config.load import read_config
from orchestrator.config.modes import Mode
from orchestrator.errors import UsageError
from tfcluster.bench_report.plots import build_figures, describe
from tfcluster.bench_report.tables import resize_table

T0 = 1_000.0
BATCH = 32
HOSTS = """[cluster]
name = "t"
mode = "between-graph"
base_port = 41000

[training]
model = "mlp"
batch_size = 32
checkpoint_every_secs = 20.0

[[hosts]]
name = "m0"
address = "127.0.0.2"
roles = ["ps"]

[[hosts]]
name = "m1"
address = "127.0.0.3"
roles = ["worker"]

[[hosts]]
name = "m2"
address = "127.0.0.4"
roles = ["worker"]
"""


def progress(task: str, points: list[tuple[float, int, int]]) -> list[ProgressSample]:
    """(seconds after T0, local step, global step) -> samples."""
    return [ProgressSample(T0 + t, task, local, gstep, local * BATCH, 1.0, 1.0, {}) for t, local, gstep in points]


def steady(task: str, t_from: int, t_to: int, rate: int, local0: int = 0, global0: int = 0,
           global_rate: int | None = None) -> list[tuple[float, int, int]]:
    g = rate if global_rate is None else global_rate
    return [(float(t), local0 + rate * (t - t_from), global0 + g * (t - t_from)) for t in range(t_from, t_to + 1)]


# --- options and cells


def test_resize_options_parse_and_combine() -> None:
    assert parse_resize(True, None, 30.0) == ResizeAt(10.0)  # a third of --seconds
    assert parse_resize(False, "20s", 30.0) == ResizeAt(20.0)  # --resize-at alone implies --resize
    assert parse_resize(True, "1m", 30.0) == ResizeAt(60.0)
    assert parse_resize(False, None, 30.0) is None
    with pytest.raises(UsageError, match="--resize-at 'soon': give a time above 0"):
        parse_resize(False, "soon", 30.0)
    with pytest.raises(UsageError, match="not --steps"):
        check_spec(BenchSpec("h.toml", steps=100, resize=ResizeAt(5.0)))
    with pytest.raises(UsageError, match="--resize with --pace"):
        check_spec(BenchSpec("h.toml", pace=5.0, resize=ResizeAt(5.0)))


def test_resize_cells_leave_a_worker_to_join(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(HOSTS)
    config, _ = read_config(str(hosts))
    spec = BenchSpec(str(hosts), modes=("between-graph", "in-graph"), workers=(1, 2), resize=ResizeAt(5.0))
    assert [(c.mode, c.workers, c.variant) for c in cells(spec, config)] == [
        ("between-graph", 1, "baseline"), ("between-graph", 1, "resize"), ("between-graph", 2, "baseline"),
        ("in-graph", 1, "baseline"), ("in-graph", 1, "resize"), ("in-graph", 2, "baseline")]
    cell = Cell("between-graph", 1, "resize", 0)
    before, after = cell_plan(spec, config, cell), grown_plan(spec, config, cell)
    assert [t.name for t in before.tasks if t.job == "worker"] == ["worker:0"]
    assert [(t.name, t.host) for t in after.tasks if t.job == "worker"] == [("worker:0", "m1"), ("worker:1", "m2")]
    # the user's checkpoints: a restart resumes from them (other cells checkpoint hourly, not to pause)
    assert cell_config(spec, config, cell).training.checkpoint_every_secs == 20.0
    assert cell_config(spec, config, Cell("between-graph", 1, "baseline", 0)).training.checkpoint_every_secs == 3600
    with pytest.raises(UsageError, match="every cell already runs all 2 worker"):
        plan_cells(BenchSpec(str(hosts), modes=("between-graph",), workers=(2,), resize=ResizeAt(5.0)))


# --- figures from samples


def test_a_live_join_has_no_stall_and_loses_no_step() -> None:
    series = progress("worker:0", steady("worker:0", 0, 30, 10))
    assert list(stall(series, T0 + 10.5, T0 + 30)) == [pytest.approx(1.0), True]  # one progress interval
    assert steps_lost(series, T0 + 10.5, T0 + 30) == (0, False, None, None)


def test_a_stall_is_the_longest_time_without_a_global_step() -> None:
    points = steady("worker:0", 0, 10, 10) + [(float(t), 100, 100) for t in range(11, 16)] + steady(
        "worker:0", 16, 25, 10, local0=110, global0=110)
    series = progress("worker:0", points)
    assert list(stall(series, T0 + 10.5, T0 + 25)) == [pytest.approx(6.0), True]  # last advance at 10, next at 16
    never = progress("worker:0", steady("worker:0", 0, 10, 10) + [(float(t), 100, 100) for t in range(11, 20)])
    assert list(stall(never, T0 + 10.5, T0 + 19)) == [pytest.approx(9.0), False]  # to the span's end


def test_a_restart_that_goes_back_loses_the_steps_between() -> None:
    """A mirrored group restarted at the join: its counters start over, and it resumed (its first report's
    global step less its own steps since) below the last step it reported: a checkpoint's. Those are lost."""
    points = steady("chief:0", 0, 10, 10) + steady("chief:0", 14, 20, 10, local0=3, global0=93)
    series = progress("chief:0", points)
    lost, restarted, before, after = steps_lost(series, T0 + 10.5, T0 + 20)
    assert (lost, restarted, before, after) == (10, True, 100, 90)  # 93 reported after 3 steps of its own
    assert list(stall(series, T0 + 10.5, T0 + 20)) == [pytest.approx(4.0), True]  # its first steps count
    resumed_above = progress("chief:0", steady("chief:0", 0, 10, 10) + steady("chief:0", 14, 20, 10, local0=3,
                                                                                 global0=103))
    assert steps_lost(resumed_above, T0 + 10.5, T0 + 20)[:2] == (0, True)  # resumed above: nothing lost


def resize_cell(mode: Mode = "between-graph") -> CellResult:
    """worker:0 alone at 10 steps/s; worker:1 joins at 10 s (stepping at 12.5), leaves at 20 s (the run
    stepping again at 21.5); window 0..30 s. In-graph: the client restarts at each change."""
    marks = [ResizeMark("join", T0 + 10.2, T0 + 12.0, T0 + 12.5, ("worker:1",), (), ("m2",)),
             ResizeMark("leave", T0 + 20.2, T0 + 21.0, T0 + 21.5, ("worker:1",), (), ("m2",))]
    if mode == "in-graph":
        points = (steady("chief:0", 0, 10, 10) + steady("chief:0", 13, 20, 20, local0=4, global0=96)
                  + steady("chief:0", 22, 30, 10, local0=2, global0=250))
        samples = CellSamples(progress("chief:0", points))
        marks = [ResizeMark(m.event, m.start, m.end, m.stepped, m.tasks, ("chief:0",), m.hosts) for m in marks]
    else:
        w0 = progress("worker:0", steady("worker:0", 0, 30, 10, global_rate=10))
        w1 = progress("worker:1", steady("worker:1", 12, 20, 10))
        samples = CellSamples(sorted([*w0, *w1], key=lambda p: p.t))
    window = Window(T0, T0 + 30)
    figures = cell_figures(samples, window, mode, [])
    figures = type(figures)(**{**figures.__dict__, "resize": resize_figures(samples, window, 1, marks)})
    return CellResult(Cell(mode, 1, "resize", 0), "ok", started=T0, window=(window.start, window.end),
                      cluster={"model": "mlp"}, figures=figures, stopped_clean=True, samples=samples)


def test_resize_figures_per_event_and_phase() -> None:
    fig = resize_cell().figures
    assert fig is not None and fig.resize is not None
    r = fig.resize
    assert r["workers"] == 1 and r["joined"] == ["worker:1"] and r["reference"] == "worker:0"
    join, leave = r["events"]
    assert join["at_s"] == pytest.approx(10.2) and join["took_s"] == pytest.approx(1.8)
    assert join["stepping_after_s"] == pytest.approx(2.3) and join["hosts"] == ["m2"]
    assert (join["steps_lost"], leave["steps_lost"]) == (0, 0)
    assert join["stall_s"] == pytest.approx(1.0) and leave["resumed"] is True
    ex = r["examples_per_s"]
    assert ex["before_join"] == pytest.approx(10 * BATCH)
    assert ex["between"] == pytest.approx(20 * BATCH)  # both workers, from the joined one's first steps
    assert ex["after_leave"] == pytest.approx(10 * BATCH)
    ig = resize_cell("in-graph").figures
    assert ig is not None and ig.resize is not None
    j, lv = ig.resize["events"]
    assert ig.resize["reference"] == "chief:0" and j["restarted"] == ["chief:0"]
    assert (j["steps_lost"], j["reference_restarted"], j["stall_s"]) == (8, True, pytest.approx(3.0))
    assert (j["global_step_before"], j["resumed_from_step"]) == (100, 92)  # 96 reported after 4 steps
    assert (lv["steps_lost"], lv["stall_s"]) == (0, pytest.approx(2.0))  # it resumed above: none lost


# --- report, table, plot


def report_with_resize() -> BenchReport:
    report = BenchReport("hosts.toml", "test", {"resize": {"at_s": 10.0}}, {"capacity_Bps": 0.0},
                         machine={"cpus": 2, "load_before": [0.5, 0.5, 0.5], "load_after": [1.0, 0.8, 0.6]})
    refused = CellResult(Cell("parameter-server-strategy", 1, "resize", 0), "failed",
                         "resize of a parameter-server-strategy run of a built-in model is not built yet")
    report.cells = [resize_cell(), resize_cell("in-graph"), refused]
    return report


def test_the_report_round_trips_and_old_reports_still_read(tmp_path: Path) -> None:
    path = bench_report.save(report_with_resize(), tmp_path / "bench.json")
    loaded = bench_report.load(path)
    assert [c.cell.variant for c in loaded.cells] == ["resize"] * 3
    first = loaded.cells[0].figures
    assert first is not None and first.resize is not None
    assert first.resize["events"][1]["event"] == "leave"
    raw = json.loads(path.read_text())
    for c in raw["cells"]:  # a report from before the resize variant: no such figures
        if c["figures"]:
            del c["figures"]["resize"]
        c["cell"]["variant"] = "baseline"
    path.write_text(json.dumps(raw))
    old = bench_report.load(path)
    assert all(c.figures is None or c.figures.resize is None for c in old.cells)
    assert resize_events(old) == []


def test_the_table_has_a_row_per_join_and_leave() -> None:
    report = report_with_resize()
    table = resize_table(report)
    assert table is not None
    console = Console(width=220, record=True, color_system=None)
    console.print(table)
    text = console.export_text()
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines() if "│" in line]
    by_key = {(r[0], r[2]): r for r in rows}
    join = by_key[("between-graph", "join worker:1 (m2)")]
    assert join[1] == "1 → 2" and join[3:7] == ["1.8 s", "2.3 s", "1.0 s", "0"] and join[8:] == ["320", "640"]
    leave = by_key[("in-graph", "leave worker:1 (m2)")]
    assert leave[1] == "2 → 1" and leave[7] == "chief:0"
    assert by_key[("in-graph", "join worker:1 (m2)")][6] == "8"
    assert resize_table(BenchReport("h", "c", {}, {})) is None


def test_the_plot_shows_the_global_step_with_each_change() -> None:
    figures = build_figures(report_with_resize())
    assert "resize" in figures
    d = describe(figures["resize"])
    assert d["title"] == "What does a worker joining and leaving cost?"
    bg, ig = d["axes"]
    assert bg["title"].startswith("between-graph") and "join: 1.0 s stalled, 0 lost" in bg["title"]
    assert ig["title"].startswith("in-graph") and "8 lost" in ig["title"]
    step = next(line for line in bg["lines"] if line["label"] == "global step (worker:0)")
    assert step["x"][0] == 0.0 and step["y"][-1] == 300.0
    assert {line["label"] for line in bg["lines"]} >= {"join: every trainer stepping again",
                                                        "leave: every trainer stepping again"}
    assert bg["xlabel"] == "seconds into the measured window" and bg["ylabel"] == "global step"
