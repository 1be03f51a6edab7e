"""The live dashboard: a header of cluster totals, graphs of the run over time (when the terminal has
the rows, or on `g`; `w` changes their window), one row per task, PS traffic, and an event log.

The app owns the poll: it reads ClusterState from a `StateSource` on a timer (one thread: the UI's)
and posts one `StateUpdated` (tui/messages.py) per poll to each view (tui/widgets/*, and the task
screen when it is open), which updates itself. It also owns the user's settings (interval, pause,
filter, the TensorBoard URL), the keys, and the actions on a task (restart / kill / stop for good, through `TaskActions`,
after a question that says what will happen: tui/task_actions.py). `t` opens the run's TensorBoard
through the `open_tensorboard` callable it was given (the key is hidden without one) and shows its URL in
the header. No view imports the app.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import time
from collections import deque
from collections.abc import Callable
from typing import ClassVar

from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Input

from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.source import StateSource, TaskActions
from orchestrator.plan.names import job_and_index
from tui.messages import WIDE_TERMINAL, FrameCost, Settings, StateUpdated
from tui.screens.confirm import ConfirmScreen
from tui.screens.stop_or_remove import offer_stop_or_remove
from tui.screens.task import TaskScreen
from tui.task_actions import RestartPolicy, Verb, WorkerRemoval, perform, question
from tui.widgets.event_log import EventLog
from tui.widgets.graph_data import next_window, window_label
from tui.widgets.graphs import GraphsPanel
from tui.widgets.header import ClusterHeader
from tui.widgets.ps_traffic import PsTrafficPanel
from tui.widgets.tasks_table import TasksTable

INTERVALS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0)
GRAPHS_MIN_HEIGHT = 32  # rows from which the graphs show without being asked
GRAPHS_MIN_ROWS = 8  # or rows the task table leaves (80x24 with a few tasks); else on `g`
FIXED_ROWS = 10  # the header (2), the bottom strip (7) and the footer


class DashboardApp(App[None]):
    CSS_PATH = "dashboard.tcss"
    TITLE = "tfcluster"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("s", "cycle_sort", "Sort"),
        Binding("slash", "filter", "Filter"),
        Binding("enter", "open_task", "Task", show=False),
        Binding("r", "restart", "Restart"),
        Binding("k", "kill", "Kill"),
        Binding("x", "stop_task", "Stop"),
        Binding("plus,equals_sign", "faster", "+/- rate"),
        Binding("minus", "slower", "", show=False),
        Binding("p", "pause", "Pause"),
        Binding("t", "tensorboard", "TensorBoard"),
        Binding("g", "graphs", "Graphs"),
        Binding("w", "graph_window", "Window", show=False),
    ]

    def __init__(self, source: StateSource, actions: TaskActions | None = None, *, readonly: bool = False,
                 interval: float = 1.0, poll_on_timer: bool = True, restart_policy: RestartPolicy | None = None,
                 open_tensorboard: Callable[[], str] | None = None, removal: WorkerRemoval | None = None) -> None:
        super().__init__()
        self.removal = removal  # a run that can be resized: `x` on a worker also offers removing it
        self.open_tensorboard = open_tensorboard  # the run's TensorBoard URL, opening it if need be (slow: a thread)
        self.source = source
        self.actions = actions
        self.restart_policy = restart_policy  # the run's; None: unknown (the questions then say less)
        self.settings = Settings(interval=interval, readonly=readonly or actions is None)
        self.poll_on_timer = poll_on_timer
        self.state: ClusterState | None = None
        self.frame_times: deque[float] = deque(maxlen=1000)  # seconds: the poll plus every view's update
        self.source_errors = 0
        self._timer: Timer | None = None
        self._dashboard_views: list[Widget] = []  # the views composed below, found once mounted
        # Found once mounted: a query looks on the screen in front, which may be a task's.
        self._graphs: GraphsPanel | None = None
        self._table: TasksTable | None = None

    @property
    def interval(self) -> float:
        return self.settings.interval

    @property
    def readonly(self) -> bool:
        return self.settings.readonly

    @property
    def paused(self) -> bool:
        return self.settings.paused

    # -- layout ---------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield ClusterHeader(id="header")
        yield GraphsPanel(id="graphs")
        yield TasksTable(id="tasks")
        with Horizontal(id="bottom"):
            yield PsTrafficPanel(id="ps")
            yield EventLog(id="log")
        yield Input(placeholder="filter by host / job / state words; Enter applies, Esc clears", id="filter")
        # Compact: 80 columns hold every key (not the ^p hint: ^p works)
        yield Footer(show_command_palette=False, compact=True)

    @property
    def tasks_table(self) -> TasksTable:
        return self.query_one("#tasks", TasksTable)

    def _views(self) -> list[Widget]:
        """Every view of the state: the dashboard's (wherever the user is) and an open task screen."""
        return [*self._dashboard_views, *(s for s in self.screen_stack if isinstance(s, TaskScreen))]

    def on_mount(self) -> None:
        self._dashboard_views = [self.query_one(t) for t in (ClusterHeader, GraphsPanel, TasksTable, PsTrafficPanel,
                                                             EventLog)]
        self.query_one("#filter", Input).display = False
        self._graphs, self._table = self.query_one(GraphsPanel), self.tasks_table
        self._place_graphs()
        self.refresh_state()
        self._start_timer()
        # A closed terminal (SIGHUP) or `kill` ends the app like `q`, so whoever started it (demo,
        # start --dash) gets to run its clean-up instead of dying mid-frame.
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGHUP, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self.exit)

    def _start_timer(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if self.poll_on_timer:
            self._timer = self.set_interval(self.interval, self.refresh_state)

    # -- refresh --------------------------------------------------------------------------------------

    def refresh_state(self) -> None:
        """Poll the source and tell every view. Errors are shown, never fatal."""
        if self.paused:
            return
        t0 = time.perf_counter()
        try:
            st = self.source.poll()
        except Exception as exc:
            self.source_errors += 1
            if self.source_errors == 1 or self.source_errors % 30 == 0:
                self.notify(f"telemetry source error: {exc}", severity="error")
            return
        self.state = st
        self._place_graphs()
        views = self._views()
        frame = FrameCost(time.perf_counter() - t0, len(views), self.frame_times.append)
        for view in views:
            view.post_message(StateUpdated(st, self.settings, wide=self._wide(), frame=frame))

    def _wide(self) -> bool:
        return self.size.width >= WIDE_TERMINAL

    def graphs_shown(self) -> bool:
        wanted = self.settings.graphs
        return wanted if wanted is not None else (self.size.height >= GRAPHS_MIN_HEIGHT
                                                  or self._spare_rows() >= GRAPHS_MIN_ROWS)

    def _spare_rows(self) -> int:
        """Rows the task table would leave empty if it took all of them (the terminal's, less the fixed
        lines, less the table's header and rows)."""
        tasks = len(self.state.tasks) if self.state is not None and not self.settings.filter_text else (
            self._table.row_count if self._table is not None else 0)
        return self.size.height - FIXED_ROWS - (tasks + 1)

    def _place_graphs(self) -> None:
        """Graphs above the table when there is room, which then takes the rows its tasks need (at most
        half the screen); without them, the table takes the rows it needs and the event log the rest:
        never a band of empty rows."""
        shown = self.graphs_shown()
        if self._graphs is not None:
            self._graphs.display = shown
        self.set_class(shown, "-graphs")
        self.set_class(not shown and self._spare_rows() > 0, "-fit-table")

    def on_resize(self, _event: events.Resize) -> None:
        if self._graphs is not None:
            self._place_graphs()

    def _change_settings(self, **changes: object) -> None:
        """New settings: the views show them over the state they already have."""
        self.settings = dataclasses.replace(self.settings, **changes)  # type: ignore[arg-type]
        if self.state is not None:
            for view in self._views():
                view.post_message(StateUpdated(self.state, self.settings, wide=self._wide()))

    # -- selection ------------------------------------------------------------------------------------

    def selected_task(self) -> str | None:
        if isinstance(self.screen, TaskScreen):
            return self.screen.task_name
        return self.tasks_table.selected_task()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self._open_task(str(event.row_key.value))

    def _open_task(self, name: str) -> None:
        self.push_screen(TaskScreen(name, self.state, self.source.task_log))

    # -- actions --------------------------------------------------------------------------------------

    def action_open_task(self) -> None:
        name = self.selected_task()
        if name is not None and not isinstance(self.screen, TaskScreen):
            self._open_task(name)

    def action_cycle_sort(self) -> None:
        key = self.tasks_table.cycle_sort()
        self.notify(f"sorted by {key}", timeout=2)

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.value = self.settings.filter_text
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._set_filter(event.value.strip())

    def on_key(self, event: events.Key) -> None:
        box = self.query_one("#filter", Input)
        if event.key == "escape" and box.display:
            self._set_filter("")

    def _set_filter(self, text: str) -> None:
        self.query_one("#filter", Input).display = False
        self.tasks_table.focus()
        self._change_settings(filter_text=text)
        self._place_graphs()

    def action_faster(self) -> None:
        self._set_interval(-1)

    def action_slower(self) -> None:
        self._set_interval(+1)

    def _set_interval(self, direction: int) -> None:
        i = min(range(len(INTERVALS)), key=lambda j: abs(INTERVALS[j] - self.interval))
        self._change_settings(interval=INTERVALS[max(0, min(len(INTERVALS) - 1, i + direction))])
        self._start_timer()

    def action_pause(self) -> None:
        self._change_settings(paused=not self.paused)
        if not self.paused:
            self.refresh_state()

    def action_graphs(self) -> None:
        self._change_settings(graphs=not self.graphs_shown())
        self._place_graphs()

    def action_graph_window(self) -> None:
        window = next_window(self.settings.graph_window)
        self._change_settings(graph_window=window)
        self.notify(f"graphs over {window_label(window)}", timeout=2)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("graphs", "graph_window") and isinstance(self.screen, TaskScreen):
            return False  # the graphs are the dashboard's: not offered on a task's screen
        return not (action == "tensorboard" and self.open_tensorboard is None)

    def action_tensorboard(self) -> None:
        opener = self.open_tensorboard
        if self.settings.tensorboard_url:
            self.notify(f"TensorBoard: {self.settings.tensorboard_url}")
            return
        if opener is None or self.workers_in_group("tensorboard"):
            return

        def run() -> None:
            try:
                url = opener()
            except Exception as exc:
                self.call_from_thread(self.notify, f"TensorBoard: {exc}", severity="error")
                return
            self.call_from_thread(self._change_settings, tensorboard_url=url)
            self.call_from_thread(self.notify, f"TensorBoard: {url}")

        self.notify("opening TensorBoard: copying the run's summaries here...")
        self.run_worker(run, thread=True, group="tensorboard")

    def workers_in_group(self, group: str) -> bool:
        return any(w.group == group and not w.is_finished for w in self.workers)

    def action_restart(self) -> None:
        self._confirm_action("restart")

    def action_kill(self) -> None:
        self._confirm_action("kill")

    def action_stop_task(self) -> None:
        name, removal = self.selected_task(), self.removal
        if name is not None and removal is not None and not self.readonly and removal.can_remove(name):
            offer_stop_or_remove(self, name, removal, lambda: self._confirm_action("stop", name))
            return
        self._confirm_action("stop")

    def _confirm_action(self, verb: Verb, name: str | None = None) -> None:
        name = name or self.selected_task()
        if name is None:
            return
        if self.readonly or self.actions is None:
            self.notify(f"read-only dashboard: {verb} {name} refused", severity="warning")
            return
        actions = self.actions
        job, idx = job_and_index(name)

        def run() -> None:
            try:
                self.call_from_thread(self.notify, perform(actions, verb, job, int(idx)))
            except Exception as exc:
                self.call_from_thread(self.notify, f"{verb} {name} failed: {exc}", severity="error")

        def answered(yes: bool | None) -> None:
            if yes:
                self.run_worker(run, thread=True, group="actions")

        task = self.state.tasks.get(name) if self.state is not None else None
        self.push_screen(ConfirmScreen(question(verb, name, task, self.restart_policy)), answered)
