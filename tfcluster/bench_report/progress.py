"""Rich progress for `tfcluster bench`: one bar for the whole bench and one per cell, each with an ETA.

A cell's bar runs over its timeline: nothing while its cluster starts and takes its first steps, then
the warm-up and the measured seconds (or the global step against `--steps`); its last column says the
phase, then the outcome. The bench's bar counts finished cells; Rich estimates both ETAs from the pace.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from orchestrator.bench.cells import Cell
from orchestrator.bench.report import CellResult
from orchestrator.bench.spec import BenchSpec


class RichBenchListener:
    def __init__(self, console: Console, spec: BenchSpec) -> None:
        self.spec = spec
        self.progress = Progress(
            TextColumn("{task.description:<42}"), BarColumn(bar_width=30), MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            console=console, transient=False,
        )
        self.overall: TaskID | None = None
        self.cell_tasks: dict[Cell, TaskID] = {}

    def __enter__(self) -> RichBenchListener:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def planned(self, cells: list[Cell]) -> None:
        self.overall = self.progress.add_task("bench", total=len(cells), status=f"{len(cells)} cells")

    def note(self, text: str) -> None:
        self.progress.console.print(escape(text))

    def cell_started(self, index: int, cell: Cell) -> None:
        total = float(self.spec.steps) if self.spec.steps is not None else self.spec.warmup_s + self.spec.seconds
        self.cell_tasks[cell] = self.progress.add_task(cell.key, total=total, status="start")

    def cell_phase(self, cell: Cell, phase: str, done: float, total: float) -> None:
        task = self.cell_tasks.get(cell)
        if task is None:
            return
        if self.spec.steps is not None:
            completed = done if phase == "measure" else 0.0
        elif phase == "warm-up":
            completed = done
        elif phase == "measure":
            completed = self.spec.warmup_s + done
        else:
            completed = None
        status = phase if phase != "first steps" else f"first steps {done:.0f}/{total:.0f}"
        if completed is None:
            self.progress.update(task, status=status)
        else:
            self.progress.update(task, completed=completed, status=status)

    def cell_finished(self, index: int, result: CellResult) -> None:
        task = self.cell_tasks.get(result.cell)
        if task is not None:
            status = "[green]ok[/]" if result.ok else f"[red]{result.status}[/]: {escape((result.error or '')[:80])}"
            if result.ok and result.figures is not None and result.figures.examples_per_s is not None:
                status += f" {result.figures.examples_per_s:,.0f} examples/s"
            total = self.progress.tasks[task].total or 1.0
            self.progress.update(task, completed=total if result.ok else self.progress.tasks[task].completed,
                                 status=status)
        if self.overall is not None:
            self.progress.advance(self.overall)
