"""What a task program knows about itself: its environment (from the plan) and the run's run.json.

The supervisor starts every task as `python -m training.task` in `<run>/code` with TaskPlan.env plus
`TFCLUSTER_RUN_DIR=<run>`. `TaskContext.from_env()` reads those and `<run>/run.json`
({"run_id", "created", "plan": ClusterPlan.to_json()}) into one immutable object. Stdlib only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .layout import RUN_DIR_ENV, RunLayout


class TaskSetupError(Exception):
    """The task cannot start: bad or missing environment or run.json (one line, no traceback)."""


@dataclass(frozen=True)
class TaskContext:
    job: str
    index: int
    host: str
    mode: str  # "between-graph" | "in-graph"
    layout: RunLayout
    plan: dict[str, Any]  # ClusterPlan.to_json()
    run_id: str  # run.json's run_id: every message between this run's tasks carries it (training/cluster/ps.py)
    task_plan: dict[str, Any]  # this task's TaskPlan, as in plan["tasks"]
    # run.json's resize serial (training/supervisor/resize.py): above 0 once `tfcluster resize` changed the
    # run, so its tasks may have started with different clusters (training/cluster/joining.py).
    resize_serial: int = 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TaskContext:
        env = os.environ if environ is None else environ
        missing = [k for k in (RUN_DIR_ENV, "TFCLUSTER_JOB", "TFCLUSTER_TASK") if not env.get(k)]
        if missing:
            raise TaskSetupError(f"environment variable(s) {', '.join(missing)} not set (the supervisor sets them)")
        layout = RunLayout(env[RUN_DIR_ENV])
        try:
            with open(layout.run_file, encoding="utf-8") as f:
                run = json.load(f)
            plan, run_id = run["plan"], str(run.get("run_id", ""))
            resize = run.get("resize")
            serial = resize.get("serial", 0) if isinstance(resize, dict) else 0
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise TaskSetupError(f"{layout.run_file}: cannot read the run's plan: {e}") from e
        job = env["TFCLUSTER_JOB"]
        try:
            index = int(env["TFCLUSTER_TASK"])
        except ValueError as e:
            raise TaskSetupError(f"TFCLUSTER_TASK={env['TFCLUSTER_TASK']!r} is not a task index") from e
        task_plan = next((t for t in plan.get("tasks", []) if t["job"] == job and int(t["index"]) == index), None)
        if task_plan is None:
            raise TaskSetupError(f"{layout.run_file}: the plan has no task {job}:{index}")
        return cls(
            job=job, index=index, host=env.get("TFCLUSTER_HOST") or str(task_plan.get("host", "")),
            mode=env.get("TFCLUSTER_MODE") or str(plan.get("mode", "between-graph")),
            layout=layout, plan=plan, run_id=run_id, task_plan=task_plan,
            resize_serial=serial if isinstance(serial, int) and not isinstance(serial, bool) else 0,
        )

    @property
    def name(self) -> str:
        return f"{self.job}:{self.index}"

    @property
    def cluster_spec(self) -> dict[str, list[str]]:
        return dict(self.plan["cluster_spec"])

    @property
    def training(self) -> dict[str, Any]:
        return dict(self.plan.get("training") or {})

    @property
    def device(self) -> str:
        """Where this task's compute goes, e.g. /job:worker/task:1/device:GPU:0."""
        return str(self.task_plan["device"])

    @property
    def is_chief(self) -> bool:
        return bool(self.task_plan.get("is_chief"))

    @property
    def num_ps(self) -> int:
        return len(self.cluster_spec.get("ps", []))

    def tasks_of(self, job: str) -> list[int]:
        return list(range(len(self.cluster_spec.get(job, []))))

    @property
    def events_file(self) -> str:
        return self.layout.events_file(self.job, self.index)

    @property
    def summaries_dir(self) -> str:
        return self.layout.summaries_dir(self.job, self.index)
