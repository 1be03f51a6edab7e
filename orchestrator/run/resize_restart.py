"""Which tasks a resize of a built-in synchronous run restarts, and what that may cost (issue 37).

In-graph and multi-worker-mirrored runs cannot take a new worker while they run: the in-graph client's one
graph names every tower's device, and a collective group has a fixed size. A resize restarts what must
see the new cluster, as the fault table's rules already restart it after a failure:
- in-graph: the client (`chief:0`) alone. The ps and the kept workers only serve, and nothing of theirs
  names the new worker (towers read from the ps and send to the client); the restarted client joins the
  variables the ps still hold (training/graph/checkpointing.py ResumingChiefSessionCreator), and falls
  back to the latest checkpoint only when a ps lost them; its towers and its big batch (batch_size x
  towers) are the new plan's;
- multi-worker-mirrored: the whole group (every kept chief and worker), which resumes from the chief's
  last checkpoint (training/tf2/mirrored.py); the global batch (batch_size x replicas) follows the new
  count. The kept hosts restart their group first and the new hosts are launched after (`kept_first`):
  a new worker started beside the old group would register with the old chief's coordination service.
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
from training.supervisor.policy import restarts_as_group  # the supervisors' own group rule

RESTARTING_MODES = ("in-graph", "multi-worker-mirrored")
_CKPT_STEP = re.compile(r'model_checkpoint_path:\s*"[^"]*?-(\d+)"')
_SPLIT = "--tfcluster-split--"


@dataclass(frozen=True)
class Progress:
    """The chief's last checkpoint's global step and the run's global step (None: not read)."""

    checkpoint: int | None = None
    step: int | None = None


def mode_restarts(change: Resize) -> list[str]:
    """The kept tasks the run's mode restarts with the new cluster (none for other modes and a user's program)."""
    plan = change.old
    if plan.uses_user_command or plan.mode not in RESTARTING_MODES:
        return []
    if plan.mode == "in-graph":
        return [t.name for t in change.staying if t.is_chief]
    return [t.name for t in change.staying if restarts_as_group(plan.mode, t.job)]


def kept_first(plan: ClusterPlan) -> bool:
    """The kept hosts take the resize before the new hosts are launched (multi-worker-mirrored, above)."""
    return plan.mode == "multi-worker-mirrored" and not plan.uses_user_command


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
    workers = sum(1 for t in change.new.tasks if t.job == "worker")
    if change.old.mode == "in-graph":
        head = (f"{names[0]} (the in-graph client) restarts with the new cluster ({workers} workers): it resumes "
                "from the variables the ps tasks hold, or from the last checkpoint if a ps lost them")
    else:
        head = (f"{', '.join(names)} restart as one group with the new cluster ({workers} workers) and resume from "
                "the last checkpoint")
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
