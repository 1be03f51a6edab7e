"""TaskSummaries: a task's `progress` events as TensorBoard scalars, one TensorBoard run per task. Stdlib only.

The ProgressReporter (training/telemetry/writer.py) hands every progress event it writes to `add`, so the
curves are the dashboard's own numbers: the loss a point shows is the loss the dashboard showed at that
step. Written to `<run dir>/summaries/<task name>/` (RunLayout.summaries_dir), at the event's global step
(its local step when it has none) and time, at most once per `every_steps` global steps (the first event
always), each rate over the whole span since the previous point:
- `loss`: the last step's;
- `steps_per_s`, `examples_per_s`: this task's own (a straggler's curve sits below the others');
- `ps_traffic/<ps:N>/pulled_bytes_per_s` and `.../pushed_bytes_per_s`: accounted bytes to and from each PS
  task (training/telemetry/accounting.py);
- `towers/<tower>/compute_s`: the in-graph client's last step, per tower.
"""

from __future__ import annotations

from typing import Any

from ..run.layout import name_of_stem
from .tfevents import EventFileWriter


class TaskSummaries:
    def __init__(self, directory: str, every_steps: int = 1) -> None:
        self.writer = EventFileWriter(directory)
        self.every_steps = max(1, int(every_steps))
        self._last_step: int | None = None
        self._examples_before = 0  # cumulative examples at the previous point (a process counts from 0)
        self._span_s = 0.0
        self._span_steps = 0
        self._span_ps: dict[str, dict[str, int]] = {}

    def add(self, event: dict[str, Any]) -> bool:
        """Take one progress event; write a point when one is due. Returns whether it wrote."""
        self._span_s += float(event.get("interval_s") or 0.0)
        self._span_steps += int(event.get("steps") or 0)
        for ps, moved in (event.get("ps_bytes") or {}).items():
            span = self._span_ps.setdefault(ps, {})
            for direction, n in moved.items():
                span[direction] = span.get(direction, 0) + int(n)
        global_step = event.get("global_step")
        step = int(global_step if global_step is not None else event.get("local_step") or 0)
        last = self._last_step
        if last is not None and step // self.every_steps <= last // self.every_steps:
            return False
        self.writer.add_scalars(step, self._scalars(event), wall_time=float(event["t"]))
        self._last_step = step
        self._span_s, self._span_steps, self._span_ps = 0.0, 0, {}
        return True

    def _scalars(self, event: dict[str, Any]) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        if event.get("loss") is not None:
            out.append(("loss", float(event["loss"])))
        span = self._span_s
        examples = event.get("examples")
        new_examples = None if examples is None else max(0, int(examples) - self._examples_before)
        self._examples_before = self._examples_before if examples is None else int(examples)
        if span > 0:
            out.append(("steps_per_s", self._span_steps / span))
            if new_examples is not None:
                out.append(("examples_per_s", new_examples / span))
            for ps, moved in sorted(self._span_ps.items()):
                out.extend((f"ps_traffic/{name_of_stem(ps)}/{direction}_bytes_per_s", n / span)
                           for direction, n in sorted(moved.items()))
        for tower, times in sorted((event.get("towers") or {}).items()):
            if isinstance(times, dict) and times.get("compute_s") is not None:
                out.append((f"towers/{name_of_stem(tower)}/compute_s", float(times["compute_s"])))
        return out

    def close(self) -> None:
        self.writer.close()
