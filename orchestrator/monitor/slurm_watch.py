"""The dashboard's view of a Slurm run's job: when Slurm ends the job (time limit, `scancel`, a node down),
the hosts' agent streams only go silent, so the job itself is asked (orchestrator.run.slurm_end.look, every
`every` seconds in a thread of its own) and, once it has ended, every state the dashboard polls says how:
the run state from the job's end, and one line in the event log with Slurm's reason.

`SlurmWatch` is a StateSource around the collector (the live dashboard, `status --watch`); one read of the
run (`status`, `dash --once`) asks the job itself (orchestrator/monitor/status.py). For any other run
nothing asks Slurm.
"""

from __future__ import annotations

import threading
import time
from typing import cast

from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.source import StateSource
from orchestrator.monitor.task_state import RunState
from orchestrator.run import records, slurm_end
from orchestrator.run.slurm_end import RunEnd

EVERY_S = 5.0


def job_end(record: records.RunRecord) -> RunEnd | None:
    """How the run's job ended (None for a run of no Slurm job, or a job still running)."""
    facts = slurm_end.look(record)
    return None if facts is None else slurm_end.ended_run(record, facts)


def say(st: ClusterState, record: records.RunRecord, end: RunEnd) -> None:
    """The job's end on a state: its run state (tick recomputes it from the tasks each poll) and the log.
    A job still ending (COMPLETING) says nothing yet."""
    if end.state == "partial":
        return
    if end.state:
        st.run_state = cast(RunState, end.state)
    assert record.slurm is not None
    text = f"Slurm job {record.slurm.job_id} {record.slurm.state or 'ended'}" + (f": {end.reason}" if end.reason else "")
    if not any(entry.text == text for entry in st.log):
        st.note(time.time(), text)


class SlurmWatch:
    """A StateSource around another one for a Slurm run (see the module docstring)."""

    def __init__(self, source: StateSource, record: records.RunRecord, every: float = EVERY_S) -> None:
        self.source = source
        self.record = record
        self.end: RunEnd | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(every,), daemon=True, name="tfcluster-slurm")
        self._thread.start()

    @classmethod
    def around(cls, source: StateSource, record: records.RunRecord) -> StateSource:
        return cls(source, record) if record.slurm is not None else source

    def _watch(self, every: float) -> None:
        while not self._stop.is_set() and (self.end is None or self.end.state == "partial"):
            self.end = job_end(self.record)
            self._stop.wait(every)

    def poll(self) -> ClusterState:
        st = self.source.poll()
        if self.end is not None:
            say(st, self.record, self.end)
        return st

    def task_log(self, job: str, task: int, lines: int = 200) -> list[str]:
        return self.source.task_log(job, task, lines)

    def close(self) -> None:
        self._stop.set()
        self.source.close()
