"""Which tasks a resize of a built-in run restarts, and what that may cost (issue 37).

In-graph, multi-worker-mirrored, synchronous between-graph and parameter-server-strategy runs cannot take
a new worker while they run: the in-graph client's one graph names every tower's device, a collective
group has a fixed size, SyncReplicasOptimizer's accumulators and token queue live on the ps sized for the
old count, and a coordinator's cluster is fixed when it starts. A resize restarts what must see the new
cluster, as the fault table's rules already restart it after a failure:
- in-graph: the client (`chief:0`) alone. The ps and the kept workers only serve, and nothing of theirs
  names the new worker (towers read from the ps and send to the client); the restarted client joins the
  variables the ps still hold (training/graph/checkpointing.py ResumingChiefSessionCreator), and falls
  back to the latest checkpoint only when a ps lost them; its towers and its big batch (batch_size x
  towers) are the new plan's;
- multi-worker-mirrored: the whole group (every kept chief and worker), which resumes from the chief's
  last checkpoint (training/tf2/mirrored.py); the global batch (batch_size x replicas) follows the new
  count;
- synchronous between-graph: every kept task, the ps too (`restarts_all_kept`). A kept ps would keep
  the accumulators and the token queue of the old count; restarted, it starts empty, the restarted chief
  finds no initialised variables and restores its last checkpoint (ResumingChiefSessionCreator), and
  every trainer builds its optimizer for the new count (replicas_to_aggregate: training/run/roles.py
  sync_aggregate; each update takes that many replicas' batches);
- parameter-server-strategy: every kept task. The coordinator (`chief:0`) reads its cluster once, when it
  starts; its variables on the ps are its own (TF2's), so the ps restart with it, and the workers with the
  new cluster; it restores its last checkpoint at start, always (training/tf2/ps_strategy.py).
All but in-graph restart on the kept hosts first and the new hosts are launched after (`kept_first`): a new
worker started beside the old tasks would register with the old chief's coordination service (mirrored),
feed the old count's accumulators (synchronous), or serve a coordinator that never names it; launched
after, it meets the new ones, which cannot step without it (the group, the aggregation) or take it at once
(TF's coordinator retries its first connection to every task of its cluster for minutes).
The steps lost are at most those since the last checkpoint: `progress` reads the last checkpoint's step
and the run's step from the chief's host (one sh command: `checkpoint` file, last progress event), so the
CLI can say them before it acts; unread, the lines give the plan's checkpoint interval instead.
"""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

from orchestrator.errors import HostError
from orchestrator.plan.model import ClusterPlan
from orchestrator.plan.resize_diff import Resize
from orchestrator.run.records import RunRecord
from orchestrator.run.remote import RemoteRun
from orchestrator.transport.factory import Opener, transport_for
from training.run.roles import MIRRORED, PS_STRATEGY, sync_aggregate
from training.supervisor.policy import restarts_as_group  # the supervisors' own group rule

_CKPT_STEP = re.compile(r'model_checkpoint_path:\s*"[^"]*?-(\d+)"')
_SPLIT = "--tfcluster-split--"


@dataclass(frozen=True)
class Progress:
    """The chief's last checkpoint's global step and the run's global step (None: not read)."""

    checkpoint: int | None = None
    step: int | None = None


def restarts_all_kept(plan: ClusterPlan) -> bool:
    """Synchronous between-graph and parameter-server-strategy: every kept task restarts, the ps too."""
    if plan.uses_user_command:
        return False
    return plan.mode == PS_STRATEGY or (plan.mode == "between-graph" and plan.training.sync_replicas)


def mode_restarts(change: Resize) -> list[str]:
    """The kept tasks the run's mode restarts with the new cluster (none for asynchronous between-graph and
    a user's program)."""
    plan = change.old
    if plan.uses_user_command:
        return []
    if plan.mode == "in-graph":
        return [t.name for t in change.staying if t.is_chief]
    if restarts_all_kept(plan):
        return [t.name for t in change.staying]
    return [t.name for t in change.staying if restarts_as_group(plan.mode, t.job)]  # mirrored's group, or none


def kept_first(plan: ClusterPlan) -> bool:
    """The kept hosts take the resize before the new hosts are launched (every restarting mode but in-graph,
    above)."""
    return not plan.uses_user_command and (plan.mode == MIRRORED or restarts_all_kept(plan))


def progress(record: RunRecord, timeout: float = 15.0, opener: Opener = transport_for) -> Progress:
    """The run's checkpoint and step as its chief's host has them; Progress() when they cannot be read."""
    plan = record.plan
    chief = plan.chief
    remote = RemoteRun(plan.host(chief.host), record.host(chief.host).run_dir, opener)
    layout = remote.layout
    ckpt = layout.checkpoints(str(plan.training.checkpoint_dir))
    script = (f"cat -- {shlex.quote(ckpt + '/checkpoint')} 2>/dev/null; echo {_SPLIT}; "
              f"tail -n 1 -- {shlex.quote(layout.events_file(chief.job, chief.index))} 2>/dev/null; exit 0\n")
    try:
        result = remote.run_shell(script, timeout)
    except HostError:
        return Progress()
    finally:
        remote.close()
    head, _, tail = result.stdout.partition(_SPLIT)
    return seen(checkpoint_step(head), event_step(tail))


def seen(checkpoint: int | None, step: int | None) -> Progress:
    """The last progress event lags the run by up to a progress interval, the checkpoint does not: a run is
    at least at its last checkpoint's step."""
    if checkpoint is not None and step is not None:
        step = max(step, checkpoint)
    return Progress(checkpoint=checkpoint, step=step)


def checkpoint_step(text: str) -> int | None:
    """The step in the `checkpoint` file's model_checkpoint_path (`model.ckpt-120`, `ckpt-120`)."""
    m = _CKPT_STEP.search(text)
    return int(m.group(1)) if m else None


def event_step(text: str) -> int | None:
    try:
        step = json.loads(text.strip()).get("global_step")
    except (ValueError, AttributeError):
        return None
    return step if isinstance(step, int) else None


def restart_lines(change: Resize, seen: Progress | None) -> list[str]:
    """What the mode's restart does and may lose, a line each ([] when nothing restarts). `seen` None:
    not asked (the dashboard's preview), the plan's checkpoint interval is said instead."""
    names = mode_restarts(change)
    if not names:
        return []
    new = change.new
    workers = sum(1 for t in new.tasks if t.job == "worker")
    listed = ", ".join(names)
    if change.old.mode == "in-graph":
        head = (f"{names[0]} (the in-graph client) restarts with the new cluster ({workers} workers): it resumes "
                "from the variables the ps tasks hold, or from the last checkpoint if a ps lost them")
    elif change.old.mode == PS_STRATEGY:
        head = (f"{listed} restart with the new cluster ({workers} workers): the coordinator's cluster is fixed "
                "when it starts, its ps and workers start with it, and it resumes from its last checkpoint")
    elif change.old.mode == "between-graph":
        trainers = sum(1 for t in new.tasks if t.job in ("chief", "worker"))
        aggregate = sync_aggregate(new.training.model_dump(), trainers)
        head = (f"{listed} restart with the new cluster ({workers} workers): the ps with fresh synchronous "
                f"accumulators ({aggregate} of {trainers} replicas' gradients per update), every trainer from the "
                "chief's last checkpoint")
    else:
        head = f"{listed} restart as one group with the new cluster ({workers} workers) and resume from the last checkpoint"
    return [head, "steps lost: at most those since the last checkpoint (" + _since(change.old, seen) + ")"]


def _since(plan: ClusterPlan, seen: Progress | None) -> str:
    if seen is not None and seen.checkpoint is not None and seen.step is not None:
        return (f"the last checkpoint was at step {seen.checkpoint}, the run is at step {seen.step}: "
                f"{max(seen.step - seen.checkpoint, 0)} steps since")
    if seen is not None and seen.step is not None:
        return f"no checkpoint yet; the run is at step {seen.step}"
    tr = plan.training
    every = [f"{tr.checkpoint_every_steps} steps" if tr.checkpoint_every_steps else "",
             f"{tr.checkpoint_every_secs:g} s" if tr.checkpoint_every_secs else ""]
    return "a checkpoint every " + " or ".join(e for e in every if e) + ", whichever comes first"
