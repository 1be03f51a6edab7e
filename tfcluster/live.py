"""A run's state for the command line: one read of every host (`status`, `dash --once`), or the agents'
streams (`status --watch`, the Textual dashboard), both judged by the one reducer (ClusterState); shown
as a Rich table, as the one JSON document (orchestrator/monitor/state_json.py), or as the dashboard.
Shared by the command modules, which never import each other. Every heavy import (Rich, Paramiko
through the orchestrator, Textual) happens inside the function that needs it.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Table

    from orchestrator.monitor.reducer import ClusterState
    from orchestrator.results.board import Board
    from orchestrator.run.records import RunRecord
    from tui.task_actions import RestartPolicy


def state_table(st: ClusterState) -> Table:
    """The ClusterState as a Rich table (status --watch, dash --once without --json)."""
    from rich.markup import escape
    from rich.table import Table

    from orchestrator.monitor.task_state import task_sort_key
    from tui import format as fmt

    loss = "-" if st.loss is None else f"{st.loss:.4f}"
    counts = "  ".join(f"{n} {s}" for s, n in st.counts.items() if n)
    table = Table(header_style="bold", title=f"run {st.run_id}: {st.run_state}  step {fmt.number(st.global_step)}  "
                                             f"loss {loss}  {fmt.rate(st.examples_per_s)} ex/s  ({counts or 'no tasks'})")
    for col, just in (("host", "left"), ("task", "left"), ("state", "left"), ("steps/s", "right"),
                      ("ex/s", "right"), ("step", "right"), ("loss", "right"), ("restarts", "right"),
                      ("age", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for t in sorted(st.tasks.values(), key=task_sort_key):
        table.add_row(escape(t.host), t.name, fmt.state_text(t.state, t.exit_code, t.held),
                      fmt.rate(t.steps_per_s), fmt.rate(t.examples_per_s, 0), fmt.number(t.global_step),
                      "-" if t.loss is None else f"{t.loss:.4f}", str(t.restarts),
                      fmt.age(t.age_s) + ("!" if t.state == "unreachable" else ""))
    for p in sorted(st.ps.values(), key=lambda p: p.name):
        table.caption = (table.caption or "") + (
            f"{p.name}: in {fmt.byte_rate(p.measured_in)} (accounted {fmt.byte_rate(p.accounted_in)}), "
            f"out {fmt.byte_rate(p.measured_out)} (accounted {fmt.byte_rate(p.accounted_out)})\n")
    return table


def print_json(st: ClusterState, *, compact: bool = False) -> None:
    """The one JSON document of the run's state on stdout (orchestrator/monitor/state_json.py), with the URL
    of the run's open TensorBoard (`tensorboard`, null when none is open)."""
    from orchestrator.monitor.state_json import state_json

    data = {**state_json(st), "tensorboard": open_tensorboard_url(st.run_id)}
    text = json.dumps(data, separators=(",", ":")) if compact else json.dumps(data, indent=1)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def print_state(st: ClusterState, as_json: bool) -> None:
    """A final or one-off state on stdout: JSON for scripts, else the table (dash --once, demo --headless)
    and the URL of the run's TensorBoard when one is open."""
    if as_json:
        print_json(st)
    else:
        from rich.console import Console

        Console().print(state_table(st))
        url = open_tensorboard_url(st.run_id)
        if url:
            Console().print(f"TensorBoard: {url}")


def open_tensorboard_url(run_id: str) -> str | None:
    """The URL of the run's open TensorBoard (`tfcluster tensorboard` or a dashboard's), if any."""
    from orchestrator.results.board_state import find_open

    board = find_open(run_id)
    return board.url if board is not None else None


class DashboardBoard:
    """The dashboard's `t`: the run's TensorBoard that is already open (another process's), or one opened
    here on first use and closed with the dashboard (`close`)."""

    def __init__(self, record: RunRecord) -> None:
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
                from orchestrator.run import records

                self.board = Board(records.load(self.record.run_id)).open()  # the run's hosts now (a resize)
            return self.board.url

    def close(self) -> None:
        with self._lock:
            if self.board is not None:
                self.board.close()
                self.board = None


def read_once(run: str | None, timeout: float) -> ClusterState:
    """`status` and `dash --once`: one read of every host of the run (orchestrator/monitor/status.py)."""
    from orchestrator.monitor.status import read_run
    from orchestrator.run import records

    return read_run(records.resolve(run), timeout=timeout)


def exit_code(st: ClusterState) -> int:
    """`status` and `dash --once`: 1 when the run failed, 3 when a host is unreachable or a task lost."""
    from tfcluster import exit_codes

    return exit_codes.for_run(st.run_state, (t.state for t in st.tasks.values()))


def watch_status(run: str | None, interval: float = 1.0, as_json: bool = False) -> None:
    """Until Ctrl-C: a Rich live table of the run (`status --watch`), or with `as_json` one JSON line of
    the whole state per interval on stdout (`status --watch --json`, for scripts that follow a run). Both
    follow the run's resizes as the dashboard does (orchestrator/monitor/reshape.py)."""
    from orchestrator.monitor.collect import Collector
    from orchestrator.monitor.slurm_watch import SlurmWatch
    from orchestrator.run import records
    from orchestrator.run.slurm_end import opener_for

    record = records.resolve(run)
    source = SlurmWatch.around(Collector.for_record(record, interval, opener_for(record)).start(), record)
    try:
        if as_json:
            while True:
                print_json(source.poll(), compact=True)
                time.sleep(interval)
        from rich.console import Console
        from rich.live import Live

        with Live(state_table(source.poll()), console=Console(), refresh_per_second=4, transient=False) as live:
            while True:
                time.sleep(interval)
                live.update(state_table(source.poll()))
    except KeyboardInterrupt:
        pass
    finally:
        source.close()


def restart_policy(record: RunRecord) -> RestartPolicy:
    """What the dashboard's questions say happens after a restart or kill: the run's plan's policy."""
    from orchestrator.plan.names import name_of_stem
    from training.supervisor.policy import needed_for_the_run
    from tui.task_actions import RestartPolicy

    needed = frozenset(name_of_stem(stem) for stem in needed_for_the_run(record.plan_json))  # job-index on hosts
    return RestartPolicy(record.plan.training.restart, record.plan.training.max_restarts, needed)


def open_dashboard(run: str | None, *, readonly: bool = False, interval: float = 1.0,
                   prometheus: int | None = None) -> None:
    """The Textual dashboard on a run until the user quits; every agent stream is closed on the way out.
    Its first frame comes from one read of every host (as `status`); the agents' streams take over, and
    follow the run's resizes (orchestrator/monitor/reshape.py), for its Prometheus exporter too."""
    from orchestrator.errors import UsageError
    from orchestrator.monitor.collect import Collector, CollectorActions
    from orchestrator.monitor.slurm_watch import SlurmWatch
    from orchestrator.monitor.status import fold, read_hosts
    from orchestrator.plan.slurm import before_allocation
    from orchestrator.run import records
    from orchestrator.run.remove_worker import WorkerRemover
    from orchestrator.run.resizable import resize_refusal
    from orchestrator.run.slurm_end import opener_for, placed

    record = placed(records.resolve(run), lambda said: print(said, file=sys.stderr, flush=True))
    if before_allocation(record.plan):
        raise UsageError(f"run {record.run_id}: its Slurm job never had nodes ({record.status}): nothing to watch")
    opener = opener_for(record)
    collector = Collector.for_record(record, interval, opener)
    now = time.time()
    for name, seen in read_hosts(record, opener=opener).items():
        fold(collector.state, name, seen, now)
    collector.start()
    watched = SlurmWatch.around(collector, record)  # a Slurm run: its job's end too
    board = DashboardBoard(record)
    exporter = None
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

        # A run that can be resized: `x` on a worker also offers removing it (orchestrator/run/remove_worker.py)
        removal = None if resize_refusal(record) else WorkerRemover(record.run_id)
        DashboardApp(source, CollectorActions(collector), readonly=readonly, interval=interval,
                     restart_policy=restart_policy(record), open_tensorboard=board, removal=removal).run()
    finally:
        board.close()
        watched.close()  # the collector with it
        if exporter is not None:
            exporter.close()
