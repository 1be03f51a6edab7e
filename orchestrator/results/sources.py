"""Where a run's results are on its hosts, and where each goes here: the one map `pull` and `tensorboard`
read. Paths on a host come from its run dir (`RunLayout(record.host(name).run_dir)`), never rebuilt.

- `summaries`: every host's `summaries/` (one directory per task: training/telemetry/task_summaries.py;
  task names are unique across hosts, so they merge), and the user's `[training] logdir` on every host
  that runs a task (relative to the run's code/ dir, the tasks' working directory), kept apart per host;
- `logs`: every host's `logs/` (task and supervisor logs; names unique across hosts);
- `checkpoints`: the chief's checkpoint dir (relative ones live in its host's run dir; an absolute one is
  shared, read through the chief's host too).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Literal

from orchestrator.run.records import RunRecord
from training.run.layout import RunLayout

Kind = Literal["checkpoints", "logs", "summaries"]
KINDS: tuple[Kind, ...] = ("checkpoints", "logs", "summaries")
EVENT_FILES = "tfevents"  # what TensorBoard reads: only these are followed


@dataclass(frozen=True)
class Source:
    host: str
    remote: str  # a directory on the host
    local: str  # a relative directory here ("" = the destination itself)
    match: str = ""  # only files whose name contains this


def _layouts(record: RunRecord) -> dict[str, RunLayout]:
    """Hosts that run tasks and whose run dir is known (a host never prepared has none)."""
    out = {}
    for host in record.plan.hosts:
        run_dir = record.host(host.name).run_dir
        if run_dir and record.plan.tasks_on(host.name):
            out[host.name] = RunLayout(run_dir)
    return out


def summary_sources(record: RunRecord, *, tasks_to: str = "summaries", logdir_to: str = "logdir",
                    events_only: bool = False) -> list[Source]:
    """Each task's TensorBoard run (under `tasks_to`/<task>) and the user's logdir (`logdir_to`/<host>)."""
    match = EVENT_FILES if events_only else ""
    logdir = record.plan.training.logdir
    out = []
    for name, layout in _layouts(record).items():
        out.append(Source(name, layout.summaries, tasks_to, match))
        if logdir:
            remote = logdir if logdir.startswith(("/", "~/")) else posixpath.join(layout.code, logdir)
            out.append(Source(name, remote, posixpath.join(logdir_to, name), match))
    return out


def sources(record: RunRecord, kinds: tuple[Kind, ...] = KINDS) -> list[Source]:
    """What `pull` copies for the kinds asked, host by host."""
    layouts = _layouts(record)
    out: list[Source] = []
    if "checkpoints" in kinds:
        chief = record.plan.chief.host
        if chief in layouts:
            out.append(Source(chief, layouts[chief].checkpoints(record.plan.training.checkpoint_dir), "checkpoints"))
    if "logs" in kinds:
        out.extend(Source(name, layout.logs, "logs") for name, layout in layouts.items())
    if "summaries" in kinds:
        out.extend(summary_sources(record))
    return out


def by_host(found: list[Source]) -> dict[str, list[Source]]:
    grouped: dict[str, list[Source]] = {}
    for source in found:
        grouped.setdefault(source.host, []).append(source)
    return grouped
