"""The bench report: JSON round trip (every raw sample kept), bad files refused in one line, the figures'
axes and series (inspected on the matplotlib objects and in figures.json), and `bench --report` /
`--compare` through the real command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.bench import report as bench_report
from orchestrator.bench.summary import rows, straggler_effects
from tests.helpers.bench_reports import sample_report
from tfcluster.bench_report.plots import build_figures, describe
from tfcluster.bench_report.tables import straggler_lines

REPO = Path(__file__).resolve().parents[2]


def tfcluster(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfcluster", *args], check=False, cwd=REPO, capture_output=True,
                          text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(home), "COLUMNS": "220", "NO_COLOR": "1",
                               "MPLBACKEND": "Agg"})


def test_report_round_trips_with_every_sample(tmp_path: Path) -> None:
    original = sample_report()
    path = bench_report.save(original, tmp_path / "bench.json")
    raw = json.loads(path.read_text())
    assert raw["schema"] == "tfcluster-bench" and raw["version"] == 1
    loaded = bench_report.load(path)
    assert [c.cell for c in loaded.cells] == [c.cell for c in original.cells]
    for a, b in zip(loaded.cells, original.cells, strict=True):
        assert len(a.samples.progress) == len(b.samples.progress)
        assert len(a.samples.hosts) == len(b.samples.hosts)
        if b.figures is not None:
            assert a.figures is not None
            assert a.figures.examples_per_s == pytest.approx(b.figures.examples_per_s)
    assert loaded.cells[-1].status == "failed" and loaded.cells[-1].error == "host m1: lost: connection reset"


@pytest.mark.parametrize(("content", "fragment"), [
    ("{not json", "not a JSON bench report"),
    ('{"schema": "something-else"}', 'no "schema": "tfcluster-bench"'),
    ('{"schema": "tfcluster-bench", "version": 99}', "report version 99; this tfcluster reads version 1"),
    ('{"schema": "tfcluster-bench", "version": 1}', "not a tfcluster bench report (KeyError"),
])
def test_a_bad_report_is_one_line_exit_2(tmp_path: Path, content: str, fragment: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(bench_report.ReportError) as info:
        bench_report.load(bad)
    assert fragment in str(info.value) and str(bad) in str(info.value)
    result = tfcluster("bench", "--report", str(bad), home=tmp_path)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_summary_medians_and_straggler_ratios() -> None:
    report = sample_report()
    by_key = {r.key: r for r in rows(report)}
    bg = by_key[("between-graph", 2, "baseline")]
    assert bg.examples_per_s == pytest.approx(180 * 32)
    assert bg.measured_over_accounted("ps:0") == pytest.approx(1.03, rel=0.01)
    assert by_key[("in-graph", 2, "baseline")].client_cpu_pct == pytest.approx(60.0)
    assert by_key[("parameter-server-strategy", 2, "baseline")].failed == ["host m1: lost: connection reset"]
    effects = {e.mode: e for e in straggler_effects(report, "worker:1")}
    assert effects["between-graph"].others == pytest.approx({"worker:0": 95 / 90})
    assert effects["in-graph"].ratios == pytest.approx({"worker:0": 12 / 50, "worker:1": 12 / 50})
    # The printed lines name the straggler as every figure does (worker:1) and give its own ratio
    said = straggler_lines(report)
    assert said and all("straggler worker:1 " in line and "the straggler at -" not in line for line in said), said


def test_figures_have_their_axes_and_series() -> None:
    figures = build_figures(sample_report())
    assert set(figures) == {"scaling", "straggler", "ps", "loss"}
    scaling = describe(figures["scaling"])
    assert scaling["title"] == "Does adding workers pay?" and scaling["where"].startswith("cluster test")
    efficiency, absolute = scaling["axes"]
    assert efficiency["xlabel"] == "workers" and efficiency["xticklabels"] == ["1", "2"]
    lines = {line["label"]: line for line in efficiency["lines"]}
    assert lines["between-graph"]["y"] == pytest.approx([1.0, 180 / 200])
    assert lines["in-graph"]["y"] == pytest.approx([1.0, 50 / 120])
    assert "multi-worker-mirrored" not in lines  # one worker count: no efficiency to show
    examples = {line["label"]: line for line in absolute["lines"]}
    assert examples["between-graph"]["y"] == pytest.approx([100 * 32, 180 * 32])
    assert examples["multi-worker-mirrored"]["x"] == [1.0]  # its one count, in the 2-worker slot
    straggler = describe(figures["straggler"])
    assert "straggler worker:1 ×4" in straggler["title"]
    assert [t.split("\n")[0] for t in straggler["axes"][0]["yticklabels"]] == ["between-graph", "in-graph"]
    assert straggler["axes"][0]["bars"][0]["values"] == pytest.approx([100 * 95 / 90, 100 * 12 / 50])
    loss = describe(figures["loss"])["axes"][0]
    assert {line["label"] for line in loss["lines"]} >= {"between-graph (2 workers)", "target loss 0.6"}
    ps = describe(figures["ps"])
    assert [ax["title"] for ax in ps["axes"]] == ["between-graph", "in-graph"]
    assert [b["label"] for b in ps["axes"][0]["bars"]] == ["ps:0 measured (kernel TCP counters)",
                                                           "ps:0 accounted (the workers' ps_bytes)"]
    assert any(line["label"].startswith("link limit") and line["y"][0] == pytest.approx(2500)
               for line in ps["axes"][0]["lines"])


def test_report_redraws_and_compare_shows_ratios(tmp_path: Path) -> None:
    a = bench_report.save(sample_report(), tmp_path / "a" / "bench.json")
    b = bench_report.save(sample_report(scale=1.5), tmp_path / "b" / "bench.json")
    redraw = tfcluster("bench", "--report", str(a), "--out", str(tmp_path / "redrawn"), home=tmp_path)
    assert redraw.returncode == 0, redraw.stderr
    for name in ("scaling", "straggler", "ps", "loss"):
        png = tmp_path / "redrawn" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    sidecar = json.loads((tmp_path / "redrawn" / "figures.json").read_text())
    assert sidecar["scaling"]["title"] == "Does adding workers pay?"
    out = redraw.stdout
    assert "tfcluster bench: test" in out and "between-graph" in out and "5,760" in out  # 180 steps/s x 32
    assert "Does adding workers pay?" in out and "0.90  5,760 examples/s" in out  # the terminal's bar charts
    assert "Does a slow worker hold the others back?" in out and "106 %" in out  # between-graph's worker:0
    assert "failed parameter-server-strategy/w2/baseline#1: failed: host m1: lost" in out
    compare = tfcluster("bench", "--compare", str(a), str(b), home=tmp_path)
    assert compare.returncode == 0, compare.stderr
    table = [[cell.strip() for cell in line.split("│")[1:-1]] for line in compare.stdout.splitlines() if "│" in line]
    row = next(r for r in table if r[:3] == ["between-graph", "2", "baseline"])
    assert row[3:6] == ["5,760", "8,640", "1.5"]  # examples/s in a, in b, and b / a
    assert next(r for r in table if r[0] == "parameter-server-strategy")[3:6] == ["-", "-", "-"]  # failed in both
