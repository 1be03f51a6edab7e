"""The bench's figures answer their question at a glance (issue 38): each figure drawn from a recorded
bench.json (benchmarks/results/modes/comparison) and from synthetic ones (4 modes x 1, 2, 4, 8 workers,
and 4 modes x 1..24 workers), then checked on the laid-out matplotlib objects: every mode present, no two
text boxes overlapping and none leaving the figure, the axes' limits keeping every series in view, task
names `job:index`; and the same answers in the terminal's Rich bar charts."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox, BboxBase
from rich.console import Console

from orchestrator.bench import report as bench_report
from orchestrator.bench.answers import scaling, straggler_shares
from orchestrator.bench.report import BenchReport
from orchestrator.bench.summary import rows
from orchestrator.config.modes import Mode
from tests.helpers.bench_reports import cell_result
from tfcluster.bench_report.plots import build_figures, describe
from tfcluster.bench_report.terminal_charts import scaling_chart, straggler_chart

RECORDED = Path(__file__).resolve().parents[2] / "benchmarks/results/modes/comparison/bench.json"
MODES: tuple[Mode, ...] = ("between-graph", "in-graph", "multi-worker-mirrored", "parameter-server-strategy")
FIGURES = ("scaling", "straggler", "ps", "loss")
STEM_NAME = re.compile(r"\b(worker|ps|chief)-\d")  # a file stem where a task name belongs
PX = 1.0  # tolerance, display pixels


def per_worker_rate(mode: Mode, workers: int) -> float:
    """Rates shaped like the recorded ones: mirrored far ahead alone, then an all-reduce cliff."""
    if mode == "multi-worker-mirrored":
        return 2000.0 if workers == 1 else 250.0 / (1 + 0.1 * workers)
    base = {"between-graph": 100.0, "in-graph": 60.0, "parameter-server-strategy": 80.0}[mode]
    return base / (1 + 0.25 * (workers - 1))


def synthetic_report(counts: tuple[int, ...]) -> BenchReport:
    """Every mode at every count, a 4x straggler on worker:1 from 2 workers on, two repeats of the
    between-graph baselines (min..max bars), nine hosts."""
    report = BenchReport("hosts.toml", "synthetic", {
        "straggler": {"task": {"job": "worker", "index": 1}, "factor": 4.0}, "target_loss": 0.6},
        {"source": "--nic-gbps", "nic_gbps": 10.0, "capacity_Bps": 2.5e9, "measurements": []},
        machine={"cpus": 64})
    for mode in MODES:
        for n in counts:
            rate = per_worker_rate(mode, n)
            synchronous = mode in ("in-graph", "multi-worker-mirrored")
            report.cells.append(cell_result(mode, n, "baseline", [rate] * n))
            if mode == "between-graph":
                report.cells.append(cell_result(mode, n, "baseline", [rate * 1.1] * n, repeat=1))
            if n >= 2:
                slow = [rate / 4] * n if synchronous else [rate * 1.2, rate / 4] + [rate * 1.2] * (n - 2)
                report.cells.append(cell_result(mode, n, "straggler", slow))
    for c in report.cells:
        c.cluster.update(hosts=[f"node{i}" for i in range(9)], batch_size=32)
    return report


REPORTS: dict[str, Callable[[], BenchReport]] = {
    "recorded": lambda: bench_report.load(RECORDED),
    "4 modes x 1,2,4,8": lambda: synthetic_report((1, 2, 4, 8)),
    "4 modes x 1..24": lambda: synthetic_report(tuple(range(1, 25))),
}


@pytest.fixture(scope="module")
def drawn() -> dict[str, tuple[BenchReport, dict[str, Figure]]]:
    """Each report with its figures, built once (the tests only inspect them)."""
    out = {}
    for name, make in REPORTS.items():
        report = make()
        out[name] = (report, build_figures(report))
    return out


def expected_modes(report: BenchReport, figure: str) -> set[str]:
    variant = "straggler" if figure == "straggler" else "baseline"
    modes: set[str] = {c.cell.mode for c in report.cells if c.ok and c.cell.variant == variant}
    return modes - {"multi-worker-mirrored"} if figure == "ps" else modes


def modes_shown(description: dict[str, Any], figure: str) -> set[str]:
    axes = description["axes"]
    if figure == "scaling":  # the absolute panel has every mode, the efficiency panel those with 2+ counts
        return {line["label"] for line in axes[1]["lines"]}
    if figure == "straggler":
        return {label.split("\n")[0] for label in axes[0]["yticklabels"]}
    if figure == "ps":
        return {ax["title"] for ax in axes}
    return {line["label"].split(" (")[0] for line in axes[0]["lines"] if "workers)" in line["label"]}


def in_view(tick: Any, axis: Any) -> bool:
    low, high = sorted(axis.get_view_interval())
    return bool(low - 1e-9 <= tick.get_loc() <= high + 1e-9)


def drawn_texts(fig: Figure) -> list[Text]:
    """Every text the figure shows: titles, axis and tick labels in view, bar labels, notes, legends."""
    hidden: set[int] = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                if not in_view(tick, axis):
                    hidden.update({id(tick.label1), id(tick.label2)})
    return [t for t in fig.findobj(Text, include_self=False)
            if t.get_visible() and t.get_text().strip() and id(t) not in hidden]


def overlap(a: Bbox, b: Bbox) -> bool:
    return bool(a.x0 + PX < b.x1 and b.x0 + PX < a.x1 and a.y0 + PX < b.y1 and b.y0 + PX < a.y1)


def inside(box: Bbox, frame: BboxBase) -> bool:
    return bool(frame.x0 - PX <= box.x0 and box.x1 <= frame.x1 + PX
                and frame.y0 - PX <= box.y0 and box.y1 <= frame.y1 + PX)


def series_points(ax: Any) -> list[tuple[str, float, float]]:
    """Display coordinates of every line's points (error caps included) and every bar's end."""
    points = []
    for line in ax.get_lines():
        for x, y in line.get_transform().transform(line.get_xydata()):
            points.append((str(line.get_label()), float(x), float(y)))
    for container in ax.containers:
        horizontal = getattr(container, "orientation", "vertical") == "horizontal"
        for p in getattr(container, "patches", []):
            end = ((p.get_x() + p.get_width(), p.get_y() + p.get_height() / 2) if horizontal
                   else (p.get_x() + p.get_width() / 2, p.get_y() + p.get_height()))
            x, y = ax.transData.transform(end)
            points.append((str(container.get_label()), float(x), float(y)))
    return points


@pytest.mark.parametrize("figure", FIGURES)
@pytest.mark.parametrize("source", list(REPORTS))
def test_each_figure_shows_every_mode_and_no_label_collides(
        drawn: dict[str, tuple[BenchReport, dict[str, Figure]]], source: str, figure: str) -> None:
    report, figures = drawn[source]
    fig = figures[figure]
    fig.draw_without_rendering()  # the constrained layout places everything
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    description = describe(fig)
    assert "?" in description["title"]  # the question it answers
    assert f"cluster {report.cluster}" in description["where"]  # and where it ran
    assert modes_shown(description, figure) >= expected_modes(report, figure)
    texts = drawn_texts(fig)
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    frame = fig.bbox
    for text, box in boxes:
        assert inside(box, frame), f"{text!r} leaves the figure: {box} of {frame}"
        assert not STEM_NAME.search(text), text
    for i, (a_text, a) in enumerate(boxes):
        for b_text, b in boxes[i + 1:]:
            assert not overlap(a, b), f"{a_text!r} {a} overlaps {b_text!r} {b}"
    for ax in fig.axes:
        view = ax.get_window_extent(renderer)
        for label, x, y in series_points(ax):
            assert view.x0 - PX <= x <= view.x1 + PX and view.y0 - PX <= y <= view.y1 + PX, (label, x, y, view)


def test_recorded_figures_carry_the_seeds_answer(drawn: dict[str, tuple[BenchReport, dict[str, Figure]]]) -> None:
    """The recorded comparison: mirrored's all-reduce cliff as an efficiency, the straggler's effect as
    one bar per mode (between-graph's fast worker at 144 %, in-graph's towers at 22 %)."""
    _, figures = drawn["recorded"]
    efficiency = {line["label"]: line["y"] for line in describe(figures["scaling"])["axes"][0]["lines"]}
    assert efficiency["multi-worker-mirrored"] == pytest.approx([1.0, 17512 / (2 * 67327)], rel=1e-3)
    assert efficiency["ideal: linear scaling (1.0)"] == [1.0, 1.0]
    assert describe(figures["scaling"])["axes"][1]["yscale"] == "log"  # 5k..67k: every mode readable
    straggler = describe(figures["straggler"])["axes"][0]
    assert [label.split("\n")[0] for label in straggler["yticklabels"]] == list(MODES)
    assert straggler["bars"][0]["values"] == pytest.approx([144.3, 22.1, 21.6, 136.7], abs=0.1)
    assert any(line["label"].startswith("100 %") and line["x"] == [100.0, 100.0] for line in straggler["lines"])
    ps = describe(figures["ps"])
    assert [b["label"] for b in ps["axes"][0]["bars"]] == ["ps:0 measured (kernel TCP counters)",
                                                           "ps:0 accounted (the workers' ps_bytes)"]
    assert any(line["label"].startswith("link limit 2,500 MB/s") for line in ps["axes"][0]["lines"])


def test_a_report_without_straggler_or_ps_draws_only_what_it_measured() -> None:
    report = synthetic_report((1, 2))
    report.spec = {}
    report.cells = [c for c in report.cells if c.cell.mode == "multi-worker-mirrored" and c.cell.variant == "baseline"]
    assert set(build_figures(report)) == {"scaling", "loss"}


def rendered(renderable: Any) -> str:
    console = Console(width=160, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_the_terminal_charts_answer_the_same_questions() -> None:
    report = bench_report.load(RECORDED)
    scaling_text = rendered(scaling_chart(scaling([r for r in rows(report) if r.ok])))
    assert "Does adding workers pay?" in scaling_text
    lines = scaling_text.splitlines()
    assert any(line.startswith("ideal") and line.rstrip().endswith("1.00") for line in lines)
    assert any("2 w" in line and "0.13  17,512 examples/s" in line for line in lines)  # mirrored's cliff
    for mode in MODES:
        assert any(line.startswith(mode) for line in lines), mode
    straggler_text = rendered(straggler_chart(straggler_shares(report), "worker:1 ×4"))
    assert "Does a slow worker hold the others back?" in straggler_text
    said = {line.split()[0]: line for line in straggler_text.splitlines() if line.split()[:1] and
            line.split()[0] in MODES}
    assert "144 %" in said["between-graph"] and "22 %" in said["in-graph"]
    # every bar on one scale: the widest (144 %) fills the bar column, 100 % about 100/144 of it
    bar = {mode: line.count("█") for mode, line in said.items()}
    assert bar["between-graph"] > bar["parameter-server-strategy"] > 4 * bar["in-graph"]
