"""GPU use per task in the dashboard: the task table's `gpu mem` column (the MiB the task's own processes
hold on its GPUs, or `on CPU?` in words) and the task screen's GPU lines (each GPU's utilisation, memory,
temperature and power, and the task's own share). Pure functions of the ClusterState, no Textual.

The column is there only while the run has GPU use to show (a task planned on a GPU, or one holding GPU
memory): a CPU cluster's table keeps its room. Figures: orchestrator/monitor/gpu_use.py.
"""

from __future__ import annotations

from rich.text import Text

from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.task_state import TaskState

ON_CPU = "on CPU?"


def has_gpu_use(st: ClusterState) -> bool:
    """Whether the table shows the `gpu mem` column (task_columns.columns)."""
    return any(t.gpu_use for t in st.tasks.values())


def mib(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{x / 1024:.1f}G" if x >= 1024 else f"{x:.0f}M"


def own_memory(tv: TaskState) -> float | None:
    """MiB the task's processes hold over all its GPUs (None: not known)."""
    held = [g.task_mem_mb for g in tv.gpu_use]
    return None if not held or any(m is None for m in held) else sum(m for m in held if m is not None)


def gpu_mem_text(tv: TaskState) -> str:
    if tv.on_cpu_suspected:
        return ON_CPU
    return mib(own_memory(tv)) if tv.gpu_use else "-"


def gpu_mem_cell(value: str) -> Text | str:
    return Text(value, style="bold yellow") if value == ON_CPU else value


def gpu_lines(st: ClusterState, tv: TaskState) -> Text:
    """The task screen's lines: one per GPU of the task, then `on CPU?` spelled out when it is said."""
    out = Text()
    host = st.hosts.get(tv.host)
    samples = {g.index: g for g in host.gpus} if host is not None else {}
    for g in tv.gpu_use:
        s = samples.get(g.index)
        util = "-" if g.util_pct is None else f"{g.util_pct:.0f}%"
        used = f"{mib(g.mem_used_mb)}/{mib(g.mem_total_mb)}" if g.mem_used_mb is not None else "-"
        extra = "" if s is None else "".join([
            "" if s.temp_c is None else f"  {s.temp_c:.0f}°C", "" if s.power_w is None else f"  {s.power_w:.0f} W"])
        out.append(f"\nGPU {g.index}: util {util}  memory {used}  this task {mib(g.task_mem_mb)}{extra}")
    if tv.on_cpu_suspected:
        out.append(f"\n{ON_CPU} planned on a GPU, but its processes hold no GPU memory", style="bold yellow")
    return out
