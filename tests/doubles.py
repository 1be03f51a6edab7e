"""Test doubles that stand in for the orchestrator's side of the dashboard (no processes behind them)."""

from __future__ import annotations


class RecordingActions:
    """TaskActions that only record what was asked (tests and the replay demo; no processes behind them)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []

    def restart_task(self, job: str, task: int) -> str:
        self.calls.append(("restart", job, task))
        return f"restart of {job}-{task} requested"

    def kill_task(self, job: str, task: int) -> str:
        self.calls.append(("kill", job, task))
        return f"kill of {job}-{task} requested"

    def stop_task(self, job: str, task: int) -> str:
        self.calls.append(("stop", job, task))
        return f"stop of {job}-{task} for good requested"
