"""The dashboard's graphs: the run's history (orchestrator/monitor/history.py) as the reducer folds it,
what the graphs draw from it (tui/widgets/graph_data.py), and the graphs band driven by Textual's pilot
(`g` shows and hides it, `w` changes its window) on replayed streams and a fake clock."""

from __future__ import annotations

import pytest
from textual_plotext import PlotextPlot

from orchestrator.monitor.events import HeartbeatEvent, ProgressEvent
from orchestrator.monitor.history import CAPACITY, MAX_TASK_LINES, Series
from testkit.synthetic import Scenario, build
from tests.helpers.dash import make_app, sync
from tests.helpers.waiting import async_wait_for
from training.telemetry.task_record import TaskRecord
from tui.app import DashboardApp
from tui.screens.task import TaskScreen
from tui.widgets.graph_data import Graph, Line, frame, next_window, window_label
from tui.widgets.graphs import GraphsPanel, scale
from tui.widgets.hosts import HostsPanel, percent_sparkline

pytestmark = pytest.mark.timeout(60)
T0 = 1_700_000_000.0


def test_an_amount_is_spread_over_the_time_it_covers() -> None:
    s = Series()
    s.spread(T0 + 0.5, T0 + 2.5, 20.0)  # 10/s over two seconds straddling three buckets
    assert s.rates(T0, T0 + 3, 3) == pytest.approx([5.0, 10.0, 5.0])
    assert s.rates(T0 - 2, T0, 2) == [None, None]  # before the series began: nothing, not zero


def test_a_full_series_halves_its_resolution_and_keeps_every_amount() -> None:
    s = Series(capacity=8)
    for i in range(20):
        s.spread(T0 + i, T0 + i + 1, 3.0)
    assert len(s) <= 8 and s.width == 4.0
    assert sum(s.sums) == pytest.approx(60.0)
    assert s.rates(T0, T0 + 16, 4) == pytest.approx([3.0] * 4)


def test_older_data_arriving_later_grows_the_series_to_the_left() -> None:
    s = Series()
    s.add(T0 + 10, 1.0)
    s.add(T0, 3.0)  # another host's backlog, older than what came first
    assert s.start == T0 and s.levels(T0, T0 + 11, 11)[0] == 3.0 and s.levels(T0, T0 + 11, 11)[10] == 1.0


def test_a_long_run_stays_bounded() -> None:
    st, events = build(Scenario(workers=2, ps=1, hosts=2, seconds=CAPACITY + 200))
    for arrival, ev in events:
        st.apply(ev, arrival)
    h = st.history
    assert len(h.examples) <= CAPACITY and h.examples.width == 2.0
    assert h.first == T0
    whole = frame(st, None, 100)
    examples = [v for v in whole.graphs[0].lines[0].values if v is not None]
    assert len(examples) >= 95 and min(examples[1:]) > 0  # the whole run, from its first seconds


def test_graphs_of_a_dashboard_opened_late_start_at_the_recorded_history() -> None:
    """When a stream opens, the agent sends a heartbeat (the clock offset), then replays the tail of each
    events file (progress, task states; its own samples are live only): all of it arrives at once, and
    the graphs draw it where it happened, not from the moment the dashboard opened."""
    st, events = build(Scenario(workers=3, ps=1, hosts=2, seconds=600))
    opened = T0 + 600
    for host in ("h0", "h1", "p0"):
        st.apply(HeartbeatEvent(opened, host, 1.0), opened)
    for _, ev in events:
        if isinstance(ev, ProgressEvent | TaskRecord):
            st.apply(ev, opened)  # the backlog
    st.tick(opened)
    fr = frame(st, 600.0, 60)
    examples = fr.graphs[0].lines[0].values
    assert all(v is not None and v > 0 for v in examples[1:])  # the whole 10 minutes, not only the last
    loss = fr.graphs[2].lines[0].values
    assert loss[1] is not None and loss[-1] is not None and loss[1] > loss[-1]  # it went down over the run
    accounted_in = next(line for line in fr.graphs[3].lines if line.label == "in*")
    assert all(v is not None and v > 0 for v in accounted_in.values[1:])


def test_steps_per_worker_then_per_host_then_the_spread_over_hosts() -> None:
    few, events = build(Scenario(workers=3, ps=1, hosts=2))
    for arrival, ev in events:
        few.apply(ev, arrival)
    assert [line.label for line in frame(few, 60.0, 30).graphs[1].lines] == ["worker:0", "worker:1", "worker:2"]
    hosts, events = build(Scenario(workers=MAX_TASK_LINES + 4, ps=1, hosts=3))
    for arrival, ev in events:
        hosts.apply(ev, arrival)
    assert [line.label for line in frame(hosts, 60.0, 30).graphs[1].lines] == ["h0", "h1", "h2"]
    many, events = build(Scenario(workers=40, ps=1, hosts=20))
    for arrival, ev in events:
        many.apply(ev, arrival)
    lines = frame(many, 60.0, 30).graphs[1].lines
    assert [line.label for line in lines] == ["slowest host", "median host", "fastest host"]
    slow, fast = lines[0].values[-2], lines[2].values[-2]
    assert slow is not None and fast is not None and slow < fast


def test_windows_cycle_and_host_levels_use_a_fixed_scale() -> None:
    assert [window_label(w) for w in (60.0, 600.0, None)] == ["1 min", "10 min", "whole run"]
    assert next_window(60.0) == 600.0 and next_window(600.0) is None and next_window(None) == 60.0
    assert percent_sparkline([0.0, 50.0, 100.0, None]) == "▁▅█ "


def plot_titles(app: DashboardApp) -> list[str]:
    titles = app.query_one(GraphsPanel).titles
    return [titles.get(str(p.id).removeprefix("plot-"), "") for p in app.query(PlotextPlot) if p.display]


@sync
async def test_graphs_show_where_there_is_room_and_on_g() -> None:
    app, _, _ = make_app("many")  # 204 tasks at 80x24: the table needs every row
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        panel = app.query_one(GraphsPanel)
        assert not panel.display
        await pilot.press("g")
        await async_wait_for(lambda: panel.display and plot_titles(app) == ["cluster examples/s (thousands), 1 min (s ago)",
                                                                            "steps/s per worker, 1 min (s ago)"],
                             10, "the first two graphs at 80x24 after g", pause=pilot.pause)
        await pilot.press("g")
        await async_wait_for(lambda: not panel.display, 10, "the graphs hidden again", pause=pilot.pause)
    app, _, _ = make_app("healthy")  # 4 tasks at 80x24: the rows the table leaves go to the graphs
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.query_one(GraphsPanel).display
    app, _, _ = make_app("many")
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        assert app.query_one(GraphsPanel).display
        await async_wait_for(lambda: len(plot_titles(app)) == 4 and app.query_one(HostsPanel).hosts[:2] == ("h0", "h1"),
                             10, "four graphs and the hosts' rows", pause=pilot.pause)


@sync
async def test_w_changes_the_window_of_every_graph() -> None:
    app, clock, _ = make_app("healthy")
    async with app.run_test(size=(140, 40)) as pilot:
        await async_wait_for(lambda: all("1 min" in t for t in plot_titles(app)), 10, "graphs over 1 min",
                             pause=pilot.pause)
        await pilot.press("w")
        await async_wait_for(lambda: all("10 min" in t for t in plot_titles(app)), 10, "graphs over 10 min",
                             pause=pilot.pause)
        await pilot.press("w")
        await async_wait_for(lambda: all("whole run" in t for t in plot_titles(app)), 10, "the whole run",
                             pause=pilot.pause)
        assert "whole run" in str(app.query_one(HostsPanel).border_title)
        clock.advance(5)
        app.refresh_state()  # a new poll keeps the window the user chose
        await pilot.pause()
        assert all("whole run" in t for t in plot_titles(app))


def test_times_far_off_or_not_finite_never_break_a_series() -> None:
    s = Series(capacity=16)
    s.add(T0, 1.0)
    s.add(0.0, 2.0)  # a clock at the epoch: the series coarsens, it does not allocate the decades between
    s.add(T0 + 1e9, 3.0)
    s.add(float("inf"), 4.0)
    s.spread(T0, float("nan"), 5.0)
    assert len(s) <= 16 and sum(s.counts) == 3


@sync
async def test_polls_while_a_task_screen_is_open_leave_the_graphs_in_place() -> None:
    app, clock, _ = make_app("healthy")
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("down", "enter")
        await async_wait_for(lambda: isinstance(app.screen, TaskScreen), 10, "the task screen", pause=pilot.pause)
        clock.advance(1)
        app.refresh_state()  # a poll with the task screen in front
        await pilot.pause()
        await pilot.press("escape")
        await async_wait_for(lambda: not isinstance(app.screen, TaskScreen), 10, "the dashboard again",
                             pause=pilot.pause)
        assert app.query_one(GraphsPanel).display


def test_large_values_are_scaled_and_the_titles_say_how() -> None:
    traffic = Graph("traffic", "PS traffic B/s", (Line("in", (20e6, None)),))
    examples = Graph("examples", "cluster examples/s", (Line("examples/s", (128_000.0,)),))
    assert scale(traffic) == (1e6, "M") and scale(Graph("x", "y B/s", ())) == (1.0, "")
    assert scale(examples) == (1e3, "k")


@sync
async def test_titles_carry_the_scale_of_their_values() -> None:
    app, _, _ = make_app("many")
    async with app.run_test(size=(160, 50)) as pilot:
        await async_wait_for(lambda: len(plot_titles(app)) == 4, 10, "four graphs", pause=pilot.pause)
        titles = app.query_one(GraphsPanel).titles
        assert titles["examples"] == "cluster examples/s (thousands), 1 min (s ago)"  # 128000/s
        assert titles["traffic"].startswith("PS traffic MB/s (* accounted)")
