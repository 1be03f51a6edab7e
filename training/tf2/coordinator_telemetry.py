"""Progress events of a parameter-server-strategy run, all written by the coordinator (`chief:0`).

The worker tasks run nothing but a TF server: the coordinator is the only process that sees steps complete.
So it writes, on its own host, with its own clock:
- `events/chief-<i>.jsonl` (job=chief): its own progress: `local_step` = steps it has seen complete (any
  worker), `global_step`, `examples`, the last loss, `ps_bytes` {} (the coordinator pulls nothing per
  step), and `coordinator: true`;
- `events/worker-<k>.jsonl` (job=worker, task=k) on behalf of each worker: `local_step` = steps worker k
  completed (counted at the coordinator by the index the step returns,
  tf.distribute.coordinator.experimental_get_current_worker_index), `examples`, its last loss and global
  step, accounted `ps_bytes` for those steps (training/telemetry/accounting.py), and `reported_by`.
Each reporter also writes its task's TensorBoard run (`summaries/<task>/`, training/telemetry/task_summaries.py)
on this host, so the workers' curves come from the coordinator too.
A consumer that adds up examples/s over tasks must skip the `coordinator: true` events (they count the
same steps again); per-task views use both. The counts are per coordinator process: a worker that restarts
keeps counting on; a restarted coordinator starts again from 0 (as any new process does).
"""

from __future__ import annotations

import math
from typing import Any

from ..run.layout import RunLayout
from ..telemetry.task_summaries import TaskSummaries
from ..telemetry.writer import ProgressReporter


class TaggedProgressReporter(ProgressReporter):
    """A ProgressReporter whose events carry extra constant fields."""

    def __init__(self, path: str, *, tags: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.tags = dict(tags)

    def _event(self, sample: tuple[int, int, int | None, float], now: float) -> dict[str, Any]:
        event = super()._event(sample, now)
        event.update(self.tags)
        return event


class CoordinatorTelemetry:
    """One reporter for the coordinator and one per worker task; `completed` is called per finished step."""

    def __init__(self, *, layout: RunLayout, summary_every_steps: int, host: str, job: str, index: int,
                 workers: int, batch_size: int, interval: float, ps_bytes_per_step: dict[str, dict[str, int]]) -> None:
        self.batch_size = batch_size
        me = f"{job}:{index}"

        def summaries(job: str, task: int) -> TaskSummaries:
            return TaskSummaries(layout.summaries_dir(job, task), summary_every_steps)

        self.own = TaggedProgressReporter(layout.events_file(job, index), tags={"coordinator": True}, host=host,
                                          job=job, task=index, interval=interval, summaries=summaries(job, index))
        self.per_worker = [
            TaggedProgressReporter(layout.events_file("worker", k), tags={"reported_by": me}, host=host,
                                   job="worker", task=k, interval=interval, ps_bytes_per_step=ps_bytes_per_step,
                                   summaries=summaries("worker", k))
            for k in range(workers)
        ]
        self.total = 0
        self.global_step = 0  # the highest step counter seen: steps in flight finish out of order
        self.by_worker = [0] * workers
        self.last_loss = float("nan")

    def start(self) -> CoordinatorTelemetry:
        self.own.start()
        for r in self.per_worker:
            r.start()
        return self

    def completed(self, worker: int, global_step: int, loss: float) -> None:
        """A step finished on `worker` (-1: unknown, its result was lost with its worker; loss NaN)."""
        if math.isnan(loss):
            loss = self.last_loss
        self.last_loss = loss
        self.total += 1
        self.global_step = global_step = max(self.global_step, global_step)
        self.own.record(self.total, global_step, self.total * self.batch_size, loss)
        if 0 <= worker < len(self.per_worker):
            self.by_worker[worker] += 1
            steps = self.by_worker[worker]
            self.per_worker[worker].record(steps, global_step, steps * self.batch_size, loss)

    def close(self) -> None:
        self.own.close()
        for r in self.per_worker:
            r.close()
