"""What a dashboard reads from and acts through.

`StateSource.poll()` drains whatever events arrived since the last call, advances the clock and returns
the (single, mutable) ClusterState; only the caller's thread touches it. The live implementation is
`orchestrator.monitor.collect.Collector`; tests and benchmarks replay recorded or synthetic events
through `testkit.replay.ReplaySource`.
`TaskActions` is how the dashboard asks the orchestrator to restart, kill or stop a task for good.
"""

from __future__ import annotations

from typing import Protocol

from orchestrator.monitor.reducer import ClusterState


class StateSource(Protocol):
    def poll(self) -> ClusterState: ...

    def task_log(self, job: str, task: int, lines: int = 200) -> list[str]: ...

    def close(self) -> None: ...


class TaskActions(Protocol):
    """Implemented by the orchestrator; each returns a one-line result for the user."""

    def restart_task(self, job: str, task: int) -> str: ...

    def kill_task(self, job: str, task: int) -> str: ...

    def stop_task(self, job: str, task: int) -> str:
        """Stop for good: the supervisor must never start it again (training/supervisor/hold.py)."""
        ...
