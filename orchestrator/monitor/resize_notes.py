"""A run's resizes (`tfcluster resize`, orchestrator/run/resize.py) as lines of the dashboard's event log:
a worker joining or leaving is news there, as `status`, `dash --once` and the live dashboard show it. The
run record is their source (records.RunRecord.resizes): one line per resize, at its time. A live source
says the resizes made while it is open as it follows them (monitor/reshape.py: `since`, those it said)."""

from __future__ import annotations

from orchestrator.monitor.reducer import ClusterState
from orchestrator.run.records import RunRecord


def say_resizes(st: ClusterState, record: RunRecord, since: int = 0) -> None:
    for entry in record.resizes[since:]:
        at, lines = entry.get("at"), entry.get("lines")
        if isinstance(at, int | float) and isinstance(lines, list) and lines:
            st.note(float(at), "resize: " + "; ".join(str(line) for line in lines))
