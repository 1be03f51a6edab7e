"""The dashboard's secondary screens: one task in detail, and the yes/no confirmation for actions."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Footer, Label, RichLog, Sparkline, Static

from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.views import window_buckets
from tui import format as fmt

if TYPE_CHECKING:
    from tui.app import DashboardApp


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("y", "answer(True)", "Yes"), Binding("n", "answer(False)", "No"),
                Binding("escape", "answer(False)", "Cancel")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Label(self.question, id="question")
            with Horizontal(id="confirm-buttons"):
                yield Button("Yes (y)", id="yes", variant="error")
                yield Button("No (n)", id="no", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class TaskScreen(Screen[None]):
    """One task: its numbers, steps/s and loss over the last minute, and a live tail of its log."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "Back"), Binding("q", "app.pop_screen", "Back", show=False)]

    def __init__(self, task_name: str) -> None:
        super().__init__()
        self.task_name = task_name
        self._log_lines: list[str] = []

    @property
    def dash(self) -> DashboardApp:
        return self.app  # type: ignore[return-value]

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
        yield Footer()

    def on_mount(self) -> None:
        if self.dash.state is not None:
            self.update_from(self.dash.state)
        self.load_log()

    def update_from(self, st: ClusterState) -> None:
        tv = st.tasks.get(self.task_name)
        if tv is None:
            self.query_one("#task-head", Static).update(f"{self.task_name}: no longer in the run")
            return
        head = Text()
        head.append(f"{tv.name}", style="bold")
        head.append(f" on {tv.host}  ")
        head.append_text(fmt.state_text(tv.liveness, tv.exit_code))
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
            self.query_one("#rate-chart", Sparkline).data = window_buckets(tv.history, st.now, 30, 60.0)
        self.query_one("#task-head", Static).update(head)
        self.query_one("#loss-chart", Sparkline).data = window_buckets(tv.loss_history, st.now, 30, 60.0,
                                                                       fill_forward=True)

    def load_log(self) -> None:
        job, _, idx = self.task_name.rpartition("-")
        source = self.dash.source

        def fetch() -> None:
            try:
                lines = source.task_log(job, int(idx), 200)
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
