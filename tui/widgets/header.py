"""The header: run id, mode, global step, loss and examples/s; then tasks per state and the settings
(refresh interval, paused, read-only, filter) and the run's TensorBoard URL once it is open. Redrawn only
when its text changes."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from orchestrator.monitor.task_state import Liveness
from tui import format as fmt
from tui.messages import StateUpdated

SHOWN_STATES: tuple[Liveness, ...] = ("running", "stalled", "starting", "restarting", "exited", "unreachable", "lost",
                                     "not-started")
RUN_STATE_STYLE = {"pending": "yellow", "running": "green", "finished": "bold green", "failed": "bold red", "stopped": "yellow",
                   "partial": "bold yellow"}
ALWAYS_SHOWN: tuple[Liveness, ...] = ("running", "stalled", "exited", "unreachable")  # the others only when some task is in them


class ClusterHeader(Static):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._shown: tuple[str, str] | None = None

    def on_state_updated(self, message: StateUpdated) -> None:
        with message.measured():
            self._show(message)

    def _show(self, message: StateUpdated) -> None:
        st, settings = message.state, message.settings
        loss = "-" if st.loss is None else f"{st.loss:.4f}"
        line1 = Text(no_wrap=True, overflow="ellipsis")
        if message.wide:
            line1.append("tfcluster ", style="bold")
        line1.append(f"{st.run_id or '?'}", style="bold cyan")
        line1.append(f"  {st.mode}  ")
        line1.append(st.run_state, style=RUN_STATE_STYLE.get(st.run_state, ""))
        line1.append(f"  step {fmt.number(st.global_step)}  loss {loss}  {fmt.rate(st.examples_per_s)} ex/s")
        line2 = Text(no_wrap=True, overflow="ellipsis")
        for s in SHOWN_STATES:
            n = st.counts.get(s, 0)
            if n or s in ALWAYS_SHOWN:
                line2.append_text(fmt.state_text(s))
                line2.append(f" {n}  ")
        tail = f"every {settings.interval:g}s"
        if settings.paused:
            tail += "  PAUSED"
        if settings.readonly:
            tail += "  read-only"
        if settings.filter_text:
            tail += f"  filter: {settings.filter_text}"
        if st.malformed:
            tail += f"  bad lines {st.malformed}"
        line2.append(tail, style="dim")
        if settings.tensorboard_url:
            line2.append(f"  TensorBoard {settings.tensorboard_url}", style="bold")
        shown = (line1.plain, line2.plain)
        if shown != self._shown:
            self._shown = shown
            # Its size is fixed (2 lines, the screen's width: dashboard.tcss), so no layout pass: a layout
            # resizes the task table, which then re-renders every visible cell once more.
            self.update(Text("\n").join([line1, line2]), layout=False)
