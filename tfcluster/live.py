"""The run's live state for the command line: one collector (an agent stream per host) feeding a Rich
table (`status --watch`, `dash --once`), JSON (scripts), or the Textual dashboard (`dash`, `start
--dash`). Shared by the command modules, which never import each other.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from orchestrator.errors import UsageError
from orchestrator.monitor import slurm_watch
from orchestrator.monitor.collect import Collector, CollectorActions
from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.slurm_watch import SlurmWatch
from orchestrator.monitor.views import task_sort_key
from orchestrator.run import records
from orchestrator.run.slurm_end import opener_for
from tui.task_actions import RestartPolicy

if TYPE_CHECKING:
    from orchestrator.results.board import Board

ONCE_HEARTBEATS = 3  # `--once` waits for this many intervals of data from every host


def state_table(st: ClusterState) -> Table:
    """The ClusterState as a Rich table (status --watch, dash --once without --json)."""
    from tui import format as fmt

    loss = "-" if st.loss is None else f"{st.loss:.4f}"
    counts = "  ".join(f"{n} {s}" for s, n in st.counts.items() if n)
    table = Table(header_style="bold", title=f"run {st.run_id}  step {fmt.number(st.global_step)}  loss {loss}  "
                                             f"{fmt.rate(st.examples_per_s)} ex/s  ({counts or 'no tasks'})")
    for col, just in (("host", "left"), ("task", "left"), ("state", "left"), ("steps/s", "right"),
                      ("ex/s", "right"), ("step", "right"), ("loss", "right"), ("restarts", "right"),
                      ("age", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for tv in sorted(st.tasks.values(), key=task_sort_key):
        table.add_row(escape(tv.host), tv.name, fmt.state_text(tv.liveness, tv.exit_code, tv.held),
                      fmt.rate(tv.steps_per_s), fmt.rate(tv.examples_per_s, 0), fmt.number(tv.global_step),
                      "-" if tv.loss is None else f"{tv.loss:.4f}", str(tv.restarts),
                      fmt.age(tv.age_s) + ("!" if tv.liveness == "unreachable" else ""))
    for p in sorted(st.ps.values(), key=lambda p: p.name):
        table.caption = (table.caption or "") + (
            f"{p.name}: in {fmt.byte_rate(p.measured_in)} (accounted {fmt.byte_rate(p.accounted_in)}), "
            f"out {fmt.byte_rate(p.measured_out)} (accounted {fmt.byte_rate(p.accounted_out)})\n")
    return table


def print_state(st: ClusterState, as_json: bool, tensorboard: str | None = None) -> None:
    """A final or one-off state on stdout: JSON for scripts, else the table (dash --once, demo --headless),
    with the URL of the run's TensorBoard when one is open (`tensorboard`: null in the JSON otherwise)."""
    if as_json:
        sys.stdout.write(json.dumps({**st.to_json(), "tensorboard": tensorboard}, indent=1) + "\n")
    else:
        Console().print(state_table(st))
        if tensorboard:
            Console().print(f"TensorBoard: {tensorboard}")


def open_tensorboard_url(run_id: str) -> str | None:
    """The URL of the run's open TensorBoard (`tfcluster tensorboard` or a dashboard's), if any."""
    from orchestrator.results.board_state import find_open

    board = find_open(run_id)
    return board.url if board is not None else None


class DashboardBoard:
    """The dashboard's `t`: the run's TensorBoard that is already open (another process's), or one opened
    here on first use and closed with the dashboard (`close`)."""

    def __init__(self, record: records.RunRecord) -> None:
        self.record = record
        self.board: Board | None = None
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            if self.board is None:
                url = open_tensorboard_url(self.record.run_id)
                if url is not None:
                    return url
                from orchestrator.results.board import Board

                self.board = Board(self.record).open()
            return self.board.url

    def close(self) -> None:
        with self._lock:
            if self.board is not None:
                self.board.close()
                self.board = None


def collect_once(run: str | None, interval: float, timeout: float | None = None) -> ClusterState:
    record = records.resolve(run)
    collector = Collector.for_record(record, interval, opener_for(record)).start()
    try:
        return slurm_watch.once(collector.wait_for_data(ONCE_HEARTBEATS, timeout or 15.0 + 4 * interval), record)
    finally:
        collector.close()


def watch_status(run: str | None, interval: float = 1.0, as_json: bool = False) -> None:
    """Until Ctrl-C: a Rich live table of the run (`status --watch`), or with `as_json` one JSON line of
    the whole state per interval on stdout (`status --watch --json`, for scripts that follow a run)."""
    record = records.resolve(run)
    source = SlurmWatch.around(Collector.for_record(record, interval, opener_for(record)).start(), record)
    try:
        if as_json:
            while True:
                sys.stdout.write(json.dumps(source.poll().to_json(), separators=(",", ":")) + "\n")
                sys.stdout.flush()
                time.sleep(interval)
        with Live(state_table(source.poll()), console=Console(), refresh_per_second=4, transient=False) as live:
            while True:
                time.sleep(interval)
                live.update(state_table(source.poll()))
    except KeyboardInterrupt:
        pass
    finally:
        source.close()


def restart_policy(record: records.RunRecord) -> RestartPolicy:
    """What the dashboard's questions say happens after a restart or kill: the run's plan's policy."""
    return RestartPolicy(record.plan.training.restart, record.plan.training.max_restarts)


def open_dashboard(run: str | None, *, readonly: bool = False, interval: float = 1.0,
                   prometheus: int | None = None) -> None:
    """The Textual dashboard on a run until the user quits; every agent stream is closed on the way out."""
    record = records.resolve(run)
    collector = Collector.for_record(record, interval, opener_for(record)).start()
    watched = SlurmWatch.around(collector, record)  # a Slurm run: its job's end too
    exporter = None
    board = DashboardBoard(record)
    try:
        if prometheus is not None:
            from orchestrator.monitor.prometheus import PrometheusExporter

            try:
                exporter = PrometheusExporter(prometheus).start()
            except OSError as exc:
                raise UsageError(f"--prometheus {prometheus}: cannot listen ({exc.strerror or exc})") from exc
            source = exporter.wrap(watched)
        else:
            source = watched
        from tui.app import DashboardApp

        DashboardApp(source, CollectorActions(collector), readonly=readonly, interval=interval,
                     restart_policy=restart_policy(record), open_tensorboard=board).run()
    finally:
        board.close()
        watched.close()  # and the collector
        if exporter is not None:
            exporter.close()
