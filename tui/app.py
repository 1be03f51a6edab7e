"""The live dashboard: a header of cluster totals, one row per task, PS traffic, and an event log.

It reads ClusterState from a `StateSource` on a timer (one thread: the UI's) and sends restart/kill
through `TaskActions`. Rows are keyed by task name and updated in place, only the cells whose text
changed; a full rebuild happens only when the set or order of rows changes (filter, sort, new task).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Input, RichLog, Static

from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.source import StateSource, TaskActions
from orchestrator.monitor.views import LIVENESS_STATES, TaskView, task_sort_key
from tui import format as fmt
from tui.screens import ConfirmScreen, TaskScreen

INTERVALS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0)
LOG_STYLE = {"exit": "red", "restart": "magenta", "recover": "green", "stall": "yellow",
             "host-lost": "bold red", "host-back": "green"}


PS_PANEL_COMPACT = 36  # columns of the PS traffic panel below 120 columns of terminal
PS_PANEL_WIDE = 58

@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int


COMPACT = (
    Column("host", "host", 6), Column("task", "task", 10), Column("state", "state", 13),
    Column("sps", "st/s", 5), Column("eps", "ex/s", 5), Column("spark", "last 60s", 8),
    Column("gpu", "gpu", 4), Column("rst", "rst", 3), Column("age", "age", 5),
)
WIDE = (
    Column("host", "host", 12), Column("task", "task", 10), Column("state", "state", 13),
    Column("sps", "steps/s", 7), Column("eps", "ex/s", 8), Column("spark", "steps/s, last 60 s", 20),
    Column("step", "global step", 11), Column("loss", "loss", 8), Column("gpu", "gpu", 5),
    Column("rst", "rst", 3), Column("age", "age", 6),
)

STATE_ORDER = {s: i for i, s in enumerate(LIVENESS_STATES)}
SORTS: dict[str, Callable[[TaskView], object]] = {
    "host": task_sort_key,
    "task": lambda t: (t.job, t.task),
    "state": lambda t: (STATE_ORDER.get(t.liveness, 9), task_sort_key(t)),
    "sps": lambda t: -(t.steps_per_s or -1.0),
    "eps": lambda t: -(t.examples_per_s or -1.0),
    "spark": lambda t: -(t.steps_per_s or -1.0),
    "step": lambda t: -(t.global_step or -1),
    "loss": lambda t: t.loss if t.loss is not None else float("inf"),
    "gpu": task_sort_key,
    "rst": lambda t: -t.restarts,
    "age": lambda t: -(t.age_s or 0.0),
}


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
        Binding("plus,equals_sign", "faster", "+/- rate"),
        Binding("minus", "slower", "", show=False),
        Binding("p", "pause", "Pause"),
    ]

    def __init__(self, source: StateSource, actions: TaskActions | None = None, *, readonly: bool = False,
                 interval: float = 1.0, poll_on_timer: bool = True) -> None:
        super().__init__()
        self.source = source
        self.actions = actions
        self.readonly = readonly or actions is None
        self.interval = interval
        self.poll_on_timer = poll_on_timer
        self.paused = False
        self.state: ClusterState | None = None
        self.sort_key = "host"
        self.sort_reverse = False
        self.filter_text = ""
        self.frame_times: deque[float] = deque(maxlen=1000)
        self.source_errors = 0
        self._columns: tuple[Column, ...] = ()
        self._order: list[str] = []
        self._cells: dict[str, tuple[str, ...]] = {}
        self._log_seen = 0
        self.ps_rows: tuple[tuple[str, str, str, str, str, str, int], ...] | None = None  # what the PS panel shows, one tuple per PS task
        self._header_sig: object = None
        self._timer: Timer | None = None

    # -- layout ---------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        yield DataTable(id="tasks", cursor_type="row")
        with Horizontal(id="bottom"):
            yield Static(id="ps")
            yield RichLog(id="log", min_width=20, max_lines=300, wrap=False)
        yield Input(placeholder="filter by host / job / state words; Enter applies, Esc clears", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#ps", Static).border_title = "PS traffic B/s (* accounted)"
        self.query_one("#log", RichLog).border_title = "events"
        self.query_one("#filter", Input).display = False
        self.watch(self.query_one("#tasks", DataTable), "scroll_y", self._on_table_scroll, init=False)
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
        """Poll the source and repaint what changed. Errors are shown, never fatal."""
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
        with self.batch_update():
            self._render_header(st)
            self._render_table(st)
            self._render_ps(st)
            self._render_log(st)
            if isinstance(self.screen, TaskScreen):
                self.screen.update_from(st)
                self.screen.load_log()
        self.frame_times.append(time.perf_counter() - t0)

    def _render_header(self, st: ClusterState) -> None:
        loss = "-" if st.loss is None else f"{st.loss:.4f}"
        wide = self.size.width >= 120
        line1 = Text(no_wrap=True, overflow="ellipsis")
        if wide:
            line1.append("tfcluster ", style="bold")
        line1.append(f"{st.run_id or '?'}", style="bold cyan")
        line1.append(f"  {st.mode}  step {fmt.number(st.global_step)}  loss {loss}  "
                     f"{fmt.rate(st.examples_per_s)} ex/s")
        line2 = Text(no_wrap=True, overflow="ellipsis")
        for s in ("running", "stalled", "starting", "restarting", "exited", "unreachable"):
            n = st.counts.get(s, 0)
            if n or s in ("running", "stalled", "exited", "unreachable"):
                line2.append_text(fmt.state_text(s))
                line2.append(f" {n}  ")
        tail = f"every {self.interval:g}s"
        if self.paused:
            tail += "  PAUSED"
        if self.readonly:
            tail += "  read-only"
        if self.filter_text:
            tail += f"  filter: {self.filter_text}"
        if st.malformed:
            tail += f"  bad lines {st.malformed}"
        line2.append(tail, style="dim")
        sig = (line1.plain, line2.plain)
        if sig != self._header_sig:
            self._header_sig = sig
            self.query_one("#header", Static).update(Text("\n").join([line1, line2]))

    def _wanted_columns(self) -> tuple[Column, ...]:
        return WIDE if self.size.width >= 120 else COMPACT

    def _visible(self, st: ClusterState) -> list[TaskView]:
        tasks = list(st.tasks.values())
        if self.filter_text:
            words = self.filter_text.lower().split()
            tasks = [t for t in tasks
                     if all(any(w in f for f in (t.host.lower(), t.name, t.liveness)) for w in words)]
        tasks.sort(key=SORTS.get(self.sort_key, task_sort_key), reverse=self.sort_reverse)  # type: ignore[arg-type]
        return tasks

    def _row(self, st: ClusterState, tv: TaskView, show_host: bool, spark_width: int) -> tuple[str, ...]:
        """Plain strings of a row, in column order; state is rendered with its style later."""
        host = st.hosts.get(tv.host)
        gpu = "-"
        if host is not None and tv.gpu is not None:
            for g in host.gpus:
                if g.index == tv.gpu and g.util_pct is not None:
                    gpu = f"{g.util_pct:.0f}%"
        state = tv.liveness if tv.liveness != "exited" or tv.exit_code is None else f"exited {tv.exit_code}"
        values = {
            "host": tv.host if show_host else "",
            "task": tv.name,
            "state": state,
            "sps": fmt.rate(tv.steps_per_s) if tv.expects_progress else "",
            "eps": fmt.rate(tv.examples_per_s, 0) if tv.expects_progress else "",
            "spark": fmt.sparkline(st.sparkline_values(tv, spark_width)) if tv.expects_progress else "",
            "step": fmt.number(tv.global_step),
            "loss": "-" if tv.loss is None else f"{tv.loss:.4f}",
            "gpu": gpu,
            "rst": str(tv.restarts),
            "age": fmt.age(tv.age_s) + ("!" if tv.liveness == "unreachable" else ""),
        }
        return tuple(values[c.key] for c in self._columns)

    def _cell(self, key: str, value: str, tv: TaskView) -> Text | str:
        if key == "state":
            return fmt.state_text(tv.liveness, tv.exit_code)
        if tv.liveness == "unreachable" and key not in ("host", "task"):
            return Text(value, style="dim")  # stale: last values kept, visibly old
        return value

    def _render_table(self, st: ClusterState) -> None:
        table = self.query_one("#tasks", DataTable)
        cols = self._wanted_columns()
        rebuild = cols != self._columns
        if rebuild:
            self._columns = cols
            table.clear(columns=True)
            for c in cols:
                table.add_column(c.label, width=c.width, key=c.key)
            self._order, self._cells = [], {}
        tasks = self._visible(st)
        order = [t.name for t in tasks]
        spark_width = next(c.width for c in cols if c.key == "spark")
        grouped = self.sort_key == "host" and not self.sort_reverse
        show_host = [not grouped or i == 0 or tasks[i - 1].host != tv.host for i, tv in enumerate(tasks)]
        if order != self._order:
            cursor = table.cursor_row
            current = self._order[cursor] if 0 <= cursor < len(self._order) else None
            table.clear()
            self._cells = {}
            for i, tv in enumerate(tasks):
                row = self._row(st, tv, show_host[i], spark_width)
                table.add_row(*(self._cell(c.key, v, tv) for c, v in zip(cols, row, strict=True)), key=tv.name)
                self._cells[tv.name] = row
            self._order = order
            if current in order:
                table.move_cursor(row=order.index(current), animate=False)
            return
        # Same rows in the same order: only the rows on screen are brought up to date (every changed cell
        # invalidates the table's render cache, and rows off screen are not drawn anyway); the others are
        # caught up when they scroll into view (see _on_table_scroll).
        first = max(int(table.scroll_y) - 2, 0)
        last = first + table.size.height + 4
        for i in range(first, min(last, len(tasks))):
            tv = tasks[i]
            old, new = self._cells.get(tv.name), self._row(st, tv, show_host[i], spark_width)
            if old == new:
                continue
            for j, c in enumerate(cols):
                if old is None or old[j] != new[j]:
                    table.update_cell(tv.name, c.key, self._cell(c.key, new[j], tv))
            self._cells[tv.name] = new

    def _on_table_scroll(self, _old: float, _new: float) -> None:
        if self.state is not None:
            self._render_table(self.state)

    def _render_ps(self, st: ClusterState) -> None:
        rows = []
        for p in sorted(st.ps.values(), key=lambda p: p.name):
            rows.append((p.name, p.host, fmt.byte_rate_short(p.measured_in), fmt.byte_rate_short(p.accounted_in),
                         fmt.byte_rate_short(p.measured_out), fmt.byte_rate_short(p.accounted_out), len(p.peers)))
        sig = tuple(rows)
        if sig == self.ps_rows:
            return
        self.ps_rows = sig
        wide = self.size.width >= 120
        # The wide layout adds host and peers columns: widen the panel with them, or every rate is cut.
        self.query_one("#ps", Static).styles.width = PS_PANEL_WIDE if wide else PS_PANEL_COMPACT
        table = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False, expand=False)
        table.add_column("task")
        if wide:
            table.add_column("host")
        table.add_column("in", justify="right")
        table.add_column("in*", justify="right")
        table.add_column("out", justify="right")
        table.add_column("out*", justify="right")
        if wide:
            table.add_column("peers", justify="right")
        for name, host, mi, ai, mo, ao, peers in rows:
            cells = [name] + ([host] if wide else []) + [mi, ai, mo, ao] + ([str(peers)] if wide else [])
            table.add_row(*cells)
        if not rows:
            self.query_one("#ps", Static).update(Text("no parameter servers", style="dim"))
        else:
            self.query_one("#ps", Static).update(table)

    def _render_log(self, st: ClusterState) -> None:
        new = st.log_total - self._log_seen
        if new <= 0:
            return
        log = self.query_one("#log", RichLog)
        entries = list(st.log)[-min(new, len(st.log)):]
        for e in entries:
            line = Text(f"{fmt.clock(e.t)} ")
            line.append(e.text, style=LOG_STYLE.get(e.kind, ""))
            log.write(line)
        self._log_seen = st.log_total

    # -- selection ------------------------------------------------------------------------------------

    def selected_task(self) -> str | None:
        if isinstance(self.screen, TaskScreen):
            return self.screen.task_name
        table = self.query_one("#tasks", DataTable)
        row = table.cursor_row
        return self._order[row] if 0 <= row < len(self._order) else None

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.push_screen(TaskScreen(str(event.row_key.value)))

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        key = str(event.column_key.value)
        if key == self.sort_key:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_key, self.sort_reverse = key, False
        self._resort()

    # -- actions --------------------------------------------------------------------------------------

    def action_open_task(self) -> None:
        name = self.selected_task()
        if name is not None and not isinstance(self.screen, TaskScreen):
            self.push_screen(TaskScreen(name))

    def action_cycle_sort(self) -> None:
        keys = [c.key for c in self._columns] or ["host"]
        i = keys.index(self.sort_key) if self.sort_key in keys else -1
        self.sort_key, self.sort_reverse = keys[(i + 1) % len(keys)], False
        self.notify(f"sorted by {self.sort_key}", timeout=2)
        self._resort()

    def _resort(self) -> None:
        if self.state is not None:
            self._render_table(self.state)

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.value = self.filter_text
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._set_filter(event.value.strip())

    def on_key(self, event: events.Key) -> None:
        box = self.query_one("#filter", Input)
        if event.key == "escape" and box.display:
            self._set_filter("")

    def _set_filter(self, text: str) -> None:
        self.filter_text = text
        box = self.query_one("#filter", Input)
        box.display = False
        self.query_one("#tasks", DataTable).focus()
        self._header_sig = None
        if self.state is not None:
            self._render_header(self.state)
            self._render_table(self.state)

    def action_faster(self) -> None:
        self._set_interval(-1)

    def action_slower(self) -> None:
        self._set_interval(+1)

    def _set_interval(self, direction: int) -> None:
        i = min(range(len(INTERVALS)), key=lambda j: abs(INTERVALS[j] - self.interval))
        self.interval = INTERVALS[max(0, min(len(INTERVALS) - 1, i + direction))]
        self._start_timer()
        self._header_sig = None
        if self.state is not None:
            self._render_header(self.state)

    def action_pause(self) -> None:
        self.paused = not self.paused
        self._header_sig = None
        if self.state is not None:
            self._render_header(self.state)
        if not self.paused:
            self.refresh_state()

    def action_restart(self) -> None:
        self._confirm_action("restart")

    def action_kill(self) -> None:
        self._confirm_action("kill")

    def _confirm_action(self, verb: str) -> None:
        name = self.selected_task()
        if name is None:
            return
        if self.readonly or self.actions is None:
            self.notify(f"read-only dashboard: {verb} {name} refused", severity="warning")
            return
        actions = self.actions
        job, _, idx = name.rpartition("-")

        def run() -> None:
            try:
                fn = actions.restart_task if verb == "restart" else actions.kill_task
                msg = fn(job, int(idx))
                self.call_from_thread(self.notify, msg)
            except Exception as exc:
                self.call_from_thread(self.notify, f"{verb} {name} failed: {exc}", severity="error")

        def answered(yes: bool | None) -> None:
            if yes:
                self.run_worker(run, thread=True, group="actions")

        self.push_screen(ConfirmScreen(f"{verb.capitalize()} {name}?"), answered)
