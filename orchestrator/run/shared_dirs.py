"""Which hosts share a directory, from what `check`'s probes reported (training/probes/workdir_probe.py):
each workdir (and a shared checkpoint_dir) carries a random id made once; hosts that report the same
id see the same directory. Their machine ids tell "several host entries on one machine" from "one
filesystem shared by several machines" (an NFS home). Pure: rows in, groups and lines out.

What sharing means is said where the user looks (`check`'s notes): the hosts' run state stays each
host's own, and the checkpoint line (orchestrator/plan/checkpoints.py) says where checkpoints go. When
the user asked for sharded checkpoints in one shared directory (`shared_checkpoint_dir = true`), the
ps hosts and the chief's must report the same checkpoint_dir id, or `check` fails them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from orchestrator.plan.checkpoints import checkpoint_hosts, checkpoint_note, shards_into_shared_dir
from orchestrator.plan.model import ClusterPlan


class ProbedHost(Protocol):
    host: str
    workdir: str
    workdir_id: str | None
    machine_id: str | None
    checkpoint_dir_id: str | None
    problems: list[str]


@dataclass(frozen=True)
class SharedDir:
    path: str  # as the first host of the group reported it
    hosts: tuple[str, ...]
    machines: int  # distinct machine ids among them (unknown ids count as distinct)

    def describe(self) -> str:
        where = "on one machine" if self.machines == 1 else f"a filesystem shared by {self.machines} machines"
        return f"hosts {', '.join(self.hosts)} share the workdir {self.path} ({where})"


def shared_workdirs(rows: Sequence[ProbedHost]) -> list[SharedDir]:
    """Groups of two or more hosts that reported the same workdir id, in the rows' order."""
    groups: dict[str, list[ProbedHost]] = {}
    for row in rows:
        if row.workdir_id:
            groups.setdefault(row.workdir_id, []).append(row)
    return [SharedDir(members[0].workdir, tuple(r.host for r in members),
                      len({r.machine_id or f"unknown-{r.host}" for r in members}))
            for members in groups.values() if len(members) > 1]


def sharing_notes(plan: ClusterPlan, rows: Sequence[ProbedHost]) -> list[str]:
    """What `check` says about shared directories; fails the checkpoint writers that do not share the
    shared checkpoint_dir the user asked for."""
    notes = [f"{group.describe()}: each host keeps its own run state there; nothing of one host's run is "
             f"another's" for group in shared_workdirs(rows)]
    if notes or plan.training.shared_checkpoint_dir:
        notes.append(checkpoint_note(plan))
    if shards_into_shared_dir(plan):
        writers = [r for r in rows if r.host in checkpoint_hosts(plan) and r.checkpoint_dir_id]
        if len({r.checkpoint_dir_id for r in writers}) > 1:
            names = ", ".join(r.host for r in writers)
            for r in writers:
                r.problems.append(f"shared_checkpoint_dir = true, but {names} do not see the same directory at "
                                  f"{plan.training.checkpoint_dir}: it is not on storage they share")
    return notes
