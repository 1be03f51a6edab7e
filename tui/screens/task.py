"""One task in detail: its numbers, steps/s (a PS: its traffic) and loss over the last minute, and a
live tail of its log.

Its dependencies are given, not looked up on the app: the task's name, the state at opening, and a
callable that fetches the last lines of a task's log (the StateSource's `task_log`, called on a worker
thread: it may go over SSH). After that it follows the StateUpdated messages the app posts to it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Label, RichLog, Sparkline, Static

from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.views import window_buckets
from orchestrator.plan.names import job_and_index
from tui import format as fmt
from tui.messages import StateUpdated
from tui.widgets.gpu_use import gpu_lines

LogFetch = Callable[[str, int, int], list[str]]  # (job, task index, lines) -> the log's last lines
LOG_LINES = 200


class TaskScreen(Screen[None]):
    """One task: its numbers, steps/s and loss over the last minute, and a live tail of its log."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "Back"), Binding("q", "app.pop_screen", "Back", show=False)]

    def __init__(self, task_name: str, state: ClusterState | None, fetch_log: LogFetch) -> None:
        super().__init__()
        self.task_name = task_name
        self._cluster = state
        self._fetch_log = fetch_log
        self._log_lines: list[str] = []

    def compose(self) -> ComposeResult:
        yield Static(id="task-head")
        with Horizontal(id="charts"):
            with Vertical():
                yield Label("steps/s, last 60 s", id="rate-label")
                yield Sparkline([], id="rate-chart")
            with Vertical():
                yield Label("loss, last 60 s", id="loss-label")
                yield Sparkline([], id="loss-chart")
        yield RichLog(id="task-log", min_width=20, max_lines=500, wrap=False)
        yield Footer(show_command_palette=False)  # as on the dashboard: room for every key at 80 columns

    def on_mount(self) -> None:
        if self._cluster is not None:
            self.update_from(self._cluster)
        self.load_log()

    def on_state_updated(self, message: StateUpdated) -> None:
        with message.measured():
            self._cluster = message.state
            self.update_from(message.state)
            self.load_log()

    def update_from(self, st: ClusterState) -> None:
        tv = st.tasks.get(self.task_name)
        if tv is None:
            self.query_one("#task-head", Static).update(f"{self.task_name}: no longer in the run")
            return
        head = Text()
        head.append(f"{tv.name}", style="bold")
        head.append(f" on {tv.host}  ")
        head.append_text(fmt.state_text(tv.state, tv.exit_code, tv.held))
        head.append(f"  pid {tv.pid or '-'}  restarts {tv.restarts}  age {fmt.age(tv.age_s)}\n")
        ps = st.ps.get(tv.name)
        if ps is not None:  # a PS writes no progress: show its traffic, measured and accounted, per peer
            head.append(f"in {fmt.byte_rate(ps.measured_in)} (accounted {fmt.byte_rate(ps.accounted_in)})  "
                        f"out {fmt.byte_rate(ps.measured_out)} (accounted {fmt.byte_rate(ps.accounted_out)})\n")
            head.append("peers in/out: " + ("  ".join(f"{ip} {fmt.byte_rate_short(a)}/{fmt.byte_rate_short(b)}"
                                                        for ip, (a, b) in sorted(ps.peers.items())) or "-"))
            self.query_one("#rate-label", Label).update("measured in+out B/s, last 60 s")
            self.query_one("#loss-label", Label).update("(a PS task reports no loss)")
            self.query_one("#rate-chart", Sparkline).data = window_buckets(ps.history, st.now, 30, 60.0)
        else:
            head.append(f"local step {fmt.number(tv.local_step)}  global step {fmt.number(tv.global_step)}  "
                        f"loss {'-' if tv.loss is None else f'{tv.loss:.4f}'}  "
                        f"{fmt.rate(tv.steps_per_s)} steps/s  {fmt.rate(tv.examples_per_s)} ex/s")
            self.query_one("#rate-chart", Sparkline).data = st.sparkline_values(tv.name, 30, 60.0)
        head.append_text(gpu_lines(st, tv))  # its GPUs and its own memory there; `on CPU?` in words
        self.query_one("#task-head", Static).update(head)
        self.query_one("#loss-chart", Sparkline).data = st.loss_values(tv.name, 30, 60.0)

    def load_log(self) -> None:
        job, idx = job_and_index(self.task_name)
        fetch_log = self._fetch_log

        def fetch() -> None:
            try:
                lines = fetch_log(job, int(idx), LOG_LINES)
            except Exception as exc:  # a host that went away must not close the screen
                lines = [f"(log unavailable: {exc})"]
            self.app.call_from_thread(self._show_log, lines)

        self.run_worker(fetch, thread=True, exclusive=True, group="task-log")

    def _show_log(self, lines: list[str]) -> None:
        if lines == self._log_lines:
            return
        log = self.query_one("#task-log", RichLog)
        old = self._log_lines
        if old and lines[: len(old)] == old:
            new = lines[len(old):]
        else:
            log.clear()
            new = lines
        for line in new:
            log.write(Text(line))
        self._log_lines = list(lines)
