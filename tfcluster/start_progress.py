"""`start`'s progress display: one row per host for a few hosts, one row per phase for many.

launch.start reports `(host, phase, done, total)` from every host (from worker processes too: one
display, this one). A row per host is what a handful of hosts wants; a thousand rows would be redrawn
ten times a second and read by nobody, so beyond ROWS_PER_HOST_UP_TO hosts the rows count hosts per
phase instead (connected, prepared, launched, running, failed).
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

ROWS_PER_HOST_UP_TO = 24
# Where each phase word puts a host in the summary; a host counts in its latest stage.
STAGES = {"connect": "connecting", "prepare": "preparing", "ship": "preparing", "launch": "launching",
          "wait": "launching", "running": "running", "failed": "failed", "cancelled": "cancelled"}


class StartProgress:
    def __init__(self, console: Console, hosts: int) -> None:
        self.hosts = hosts
        self.per_host = hosts <= ROWS_PER_HOST_UP_TO
        self.progress = Progress(
            TextColumn("{task.fields[host]:<12}"), TextColumn("{task.description:<10}"), BarColumn(),
            MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=False,
        )
        self._rows: dict[str, TaskID] = {}
        self._stage: dict[str, str] = {}
        self._counts: dict[str, int] = {}

    def __enter__(self) -> StartProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(None, None, None)

    def report(self, host: str, phase: str, done: int, total: int) -> None:
        if self.per_host:
            if host not in self._rows:
                self._rows[host] = self.progress.add_task(phase, host=host, total=max(total, 1))
            self.progress.update(self._rows[host], description=phase, completed=done, total=max(total, 1))
            return
        stage = STAGES.get(phase, phase)
        before = self._stage.get(host)
        if before == stage:
            return
        self._stage[host] = stage
        if before is not None:
            self._counts[before] -= 1
            self._row(before)
        self._counts[stage] = self._counts.get(stage, 0) + 1
        self._row(stage)

    def job(self, job_id: str, said: str) -> None:
        """A Slurm job's state while `start` waits for its nodes (`PENDING (Priority)`, `RUNNING`): a row of
        its own on a terminal, else one line per change."""
        console = self.progress.console
        if not console.is_terminal:
            console.print(f"Slurm job {job_id}: {said}", highlight=False, markup=False)
            return
        row = f"job {job_id}"
        if row not in self._rows:
            self._rows[row] = self.progress.add_task(said, host=row, total=1)
        self.progress.update(self._rows[row], description=said, completed=int(said == "RUNNING"))

    def _row(self, stage: str) -> None:
        if stage not in self._rows:
            self._rows[stage] = self.progress.add_task(stage, host=f"{self.hosts} hosts", total=self.hosts)
        self.progress.update(self._rows[stage], completed=self._counts[stage])
