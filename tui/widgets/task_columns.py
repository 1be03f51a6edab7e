"""The task table's columns (compact below 120 columns of terminal, wide from there), its sort orders,
its filter, and one row's cell texts. Pure functions of the ClusterState, no Textual."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text

from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.task_state import LIVENESS_STATES, TaskState, task_sort_key
from tui import format as fmt
from tui.widgets.gpu_use import ON_CPU, gpu_mem_cell, gpu_mem_text, own_memory

NO_PROGRESS = "no progress reported"


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

GPU_MEM = Column("gmem", "gpu mem", 7)  # only while the run has GPU use to show (tui/widgets/gpu_use.py)


def columns(wide: bool, gpu_use: bool) -> tuple[Column, ...]:
    """The table's columns; with GPU use, `gpu mem` after `gpu` (at 80 columns in the place of ex/s: no
    room for both)."""
    cols: tuple[Column, ...] = WIDE if wide else COMPACT
    if not gpu_use:
        return cols
    cols = cols if wide else tuple(c for c in cols if c.key != "eps")
    at = next((i + 1 for i, c in enumerate(cols) if c.key == "gpu"), len(cols))
    return (*cols[:at], GPU_MEM, *cols[at:])


STATE_ORDER = {s: i for i, s in enumerate(LIVENESS_STATES)}
SORTS: dict[str, Callable[[TaskState], object]] = {
    "host": task_sort_key,
    "task": lambda t: (t.job, t.index),
    "state": lambda t: (STATE_ORDER.get(t.state, 9), task_sort_key(t)),
    "sps": lambda t: -(t.steps_per_s or -1.0),
    "eps": lambda t: -(t.examples_per_s or -1.0),
    "spark": lambda t: -(t.steps_per_s or -1.0),
    "step": lambda t: -(t.global_step or -1),
    "loss": lambda t: t.loss if t.loss is not None else float("inf"),
    "gpu": task_sort_key,
    "gmem": lambda t: (not t.on_cpu_suspected, -(own_memory(t) or 0.0)),
    "rst": lambda t: -t.restarts,
    "age": lambda t: -(t.age_s or 0.0),
}


def visible_tasks(st: ClusterState, filter_text: str, sort_key: str, reverse: bool) -> list[TaskState]:
    """The rows to show, in order: every word of the filter must be in the host, the name or the state."""
    tasks = list(st.tasks.values())
    if filter_text:
        words = filter_text.lower().split()
        tasks = [t for t in tasks if all(any(w in f for f in (t.host.lower(), t.name, t.state)) for w in words)]
    tasks.sort(key=SORTS.get(sort_key, task_sort_key), reverse=reverse)  # type: ignore[arg-type]
    return tasks


def row_texts(st: ClusterState, tv: TaskState, columns: tuple[Column, ...], show_host: bool,
              spark_width: int) -> tuple[str, ...]:
    """Plain strings of a row, in column order; state is rendered with its style by `cell`."""
    host = st.hosts.get(tv.host)
    gpu = "-"
    if host is not None and tv.gpus:  # a task with several GPUs: their mean use
        utils = [g.util_pct for g in host.gpus if g.index in tv.gpus and g.util_pct is not None]
        if utils:
            gpu = f"{sum(utils) / len(utils):.0f}%"
    state = fmt.state_word(tv.state, tv.exit_code, tv.held, tv.restart_reason)
    reports = tv.reports != "no"
    values = {
        "host": tv.host if show_host else "",
        "task": tv.name,
        "state": state,
        "sps": fmt.rate(tv.steps_per_s) if reports else "",
        "eps": fmt.rate(tv.examples_per_s, 0) if reports else "",
        # A program judged by its CPU: say so where its rates would be, never leave them blank.
        "spark": NO_PROGRESS if tv.no_progress_reported else (
            fmt.sparkline(st.sparkline_values(tv.name, spark_width)) if reports else ""),
        "step": fmt.number(tv.global_step),
        "loss": "-" if tv.loss is None else f"{tv.loss:.4f}",
        "gpu": gpu,
        "rst": str(tv.restarts),
        "gmem": gpu_mem_text(tv),
        "age": fmt.age(tv.age_s) + ("!" if tv.state == "unreachable" else ""),
    }
    return tuple(values[c.key] for c in columns)


def cell(key: str, value: str, tv: TaskState) -> Text | str:
    """What a cell shows for its plain text: the state with its glyph and colour, stale values dimmed."""
    if key == "state":
        return fmt.state_text(tv.state, tv.exit_code, tv.held, tv.restart_reason)
    if key == "spark" and value == NO_PROGRESS:
        return Text(value, style="dim italic")
    if key == "gmem" and value == ON_CPU:
        return gpu_mem_cell(value)  # in words; the colour only helps the eye
    if tv.state == "unreachable" and key not in ("host", "task"):
        return Text(value, style="dim")  # stale: last values kept, visibly old
    return value
