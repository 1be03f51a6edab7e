"""A live source follows a resize at once (issue 37): the collector (monitor/collect.py) watches the run's
local record and, when a resize changed the run's plan, opens the agent streams of the hosts that joined,
retires those of the hosts that left, and makes its ClusterState the new plan's: a task that joined gets
its row as `ClusterState.from_plan` gives one; a task that left (or moved: it ended where it was and starts
where it goes) and a host that left lose their rows, never shown `lost`; each resize is a line of the
event log, in the words `status` uses (monitor/resize_notes.py). `status --watch`, the dashboard and its
Prometheus exporter all poll that collector, so all of them follow.

Why the local record is enough: it is what every command takes the run's shape from (`status`, `stop`,
`logs`), `tfcluster resize` and the dashboard's "remove worker" save it once the resize is done (run/resize.py
step 5), atomically (records.save renames a new file over the old one), and it lives in the state dir of
the machine that started the run and resizes it, where its dashboards run: no host is asked anything.
Cheap at any size (1024 tasks at 1 Hz): one stat of the file per poll; the record is read again only when
the file changed (another inode, size or mtime), then diffed by task name against the plan the source
follows. The first poll reads it once: a resize done while the source was being built is not missed.

Between a resize's launch of its new hosts and the record's save (seconds), a new host's tasks have no row
yet; a removed host's tasks show how they were stopped until the save takes their rows away.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.resize_notes import say_resizes
from orchestrator.plan.model import ClusterPlan, HostPlan, TaskPlan
from orchestrator.run import records
from training.run.layout import RunLayout


def where(record: records.RunRecord, host: HostPlan) -> tuple[str, str]:
    """A host's run dir and python, as the start (or the resize) that launched it there resolved them (the
    plan's when the record has no entry for it: a poll must never fail on a record)."""
    rec = next((h for h in record.hosts if h.name == host.name), None)
    run_dir, python = (rec.run_dir, rec.python) if rec is not None else ("", "")
    return run_dir or RunLayout.for_host(host.workdir, record.run_id, host.name).root, python or host.python


def _placed(plan: ClusterPlan) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Task name -> where it runs: a worker on another host or other GPUs is another process (resize_diff)."""
    return {t.name: (t.host, t.gpus) for t in plan.tasks}


@dataclass(frozen=True)
class Reshape:
    """What a saved record changed in the run a source follows (empty but for `record` when only its
    status or notes changed)."""

    record: records.RunRecord  # as it is saved now
    hosts_added: tuple[HostPlan, ...] = ()
    hosts_removed: tuple[str, ...] = ()
    tasks_added: tuple[TaskPlan, ...] = ()
    tasks_removed: tuple[str, ...] = ()  # moved ones too: dropped, then added where they go
    resizes_said: int = 0  # the record's resizes the source had said already

    @classmethod
    def between(cls, old: records.RunRecord, new: records.RunRecord) -> Reshape:
        before, after = _placed(old.plan), _placed(new.plan)
        old_hosts, new_hosts = {h.name for h in old.plan.hosts}, {h.name for h in new.plan.hosts}
        return cls(
            record=new,
            hosts_added=tuple(h for h in new.plan.hosts if h.name not in old_hosts),
            hosts_removed=tuple(h.name for h in old.plan.hosts if h.name not in new_hosts),
            tasks_added=tuple(t for t in new.plan.tasks if before.get(t.name) != after[t.name]),
            tasks_removed=tuple(n for n, at in before.items() if after.get(n) != at),
            resizes_said=min(len(old.resizes), len(new.resizes)),
        )

    def apply(self, st: ClusterState) -> None:
        """The state made the new plan's (on the thread that owns it), its resizes said in the event log."""
        for name in self.tasks_removed:
            st.drop_task(name)
        for name in self.hosts_removed:
            st.drop_host(name)
        for h in self.hosts_added:
            st.host(h.name)
        for t in self.tasks_added:
            st.add_planned(self.record.plan, t)
        st.record_status = self.record.status
        say_resizes(st, self.record, since=self.resizes_said)


class RecordWatch:
    """The run's local record, looked at once per `changed()` (a stat), read again when the file changed."""

    def __init__(self, record: records.RunRecord, path: Path | None = None) -> None:
        self.record = record  # the run as the source follows it
        self.path = path or records.record_path(record.run_id)
        self._seen: tuple[int, int, int] | None = None  # (inode, size, mtime) last read: None, read at once

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            s = os.stat(self.path)
        except OSError:  # purged (`stop --purge`): nothing more to follow
            return None
        return s.st_ino, s.st_size, s.st_mtime_ns

    def changed(self) -> Reshape | None:
        """What the record changed since the last look (None: the file is as it was, or unreadable)."""
        seen = self._stat()
        if seen is None or seen == self._seen:
            return None
        self._seen = seen
        try:
            record = records.read(self.path)
        except records.RecordError:  # damaged: the shape followed so far stands until a good save
            return None
        change = Reshape.between(self.record, record)
        self.record = record
        return change
