"""The dashboard's "remove this worker from the run" (issue 37): a resize to the run's plan less one worker
(orchestrator.plan.without_worker), done by orchestrator.run.resize as `tfcluster resize` does one.

Each call reads the run's record afresh: the dashboard may have been open across another resize, and the
run's plan is the record's. `can_remove` is cheap (the record, no host): the dashboard asks it when `x` is
pressed on a row; `preview` says what the resize would do; `remove` does it (seconds: off the UI thread).
"""

from __future__ import annotations

from orchestrator.errors import UsageError
from orchestrator.plan.resize_diff import Resize, plan_resize
from orchestrator.plan.without_worker import plan_without, removable
from orchestrator.run import records
from orchestrator.run.resizable import resize_refusal
from orchestrator.run.resize import ResizeOptions, resize
from orchestrator.run.resize_restart import restart_lines
from orchestrator.transport.factory import Opener, transport_for


class WorkerRemover:
    """tui.task_actions.WorkerRemoval for one run."""

    def __init__(self, run_id: str, options: ResizeOptions | None = None, opener: Opener = transport_for) -> None:
        self.run_id = run_id
        self.options = options or ResizeOptions()
        self.opener = opener

    def can_remove(self, name: str) -> bool:
        try:
            record = records.load(self.run_id)
        except UsageError:  # the record is gone (purged) or damaged: nothing to offer
            return False
        return not resize_refusal(record) and removable(record.plan, name)

    def _change(self, name: str) -> tuple[records.RunRecord, Resize]:
        record = records.load(self.run_id)
        refusal = resize_refusal(record)
        if refusal:
            raise UsageError(refusal)
        return record, plan_resize(record.plan, plan_without(record.plan, name))

    def preview(self, name: str) -> list[str]:
        """What removing `name` does, a line each (as `tfcluster resize --dry-run`); UsageError when it cannot."""
        change = self._change(name)[1]
        return change.lines() + restart_lines(change, None)  # the client, the group, or every kept task restarts

    def remove(self, name: str) -> str:
        """Remove worker `name` from the run; one line saying what was done. A failed resize raises (a
        ResizeFailed says what it undid); a task not verified gone is said in the line."""
        record, change = self._change(name)
        result = resize(record, change, record.config_path, self.options, self.opener)
        said = f"removed {name} from {self.run_id} in {result.seconds:.1f}s: {'; '.join(change.lines())}"
        if result.left:
            said += "; NOT verified gone: " + "; ".join(f"{h}: {what}" for h, what in result.left.items())
        return said
