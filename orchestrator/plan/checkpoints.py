"""Where a run's checkpoints go, in the user's words: one line `plan` and `check` print.

The trainers decide it (training/graph/between_graph.py `_checkpointing`, training/graph/in_graph.py,
training/tf2/): a relative `checkpoint_dir` lives in the chief's host's own run dir, written whole by the
chief; `shared_checkpoint_dir = true` (between-graph and in-graph) makes every ps write its own shard
into `checkpoint_dir`, the path the chief names, so it must be one directory that every ps host and the
chief's host see: storage they share. The TF2 modes always write whole checkpoints from the chief (the
coordinator). A user's own `command` checkpoints as it likes. Pure.
"""

from __future__ import annotations

import posixpath

from orchestrator.plan.model import ClusterPlan

SHARDED_MODES = ("between-graph", "in-graph")  # where shared_checkpoint_dir makes the saver sharded


def shards_into_shared_dir(plan: ClusterPlan) -> bool:
    """Every ps writes its own shard into checkpoint_dir (which must then be shared storage)."""
    return plan.training.shared_checkpoint_dir and plan.mode in SHARDED_MODES and not plan.uses_user_command


def checkpoint_hosts(plan: ClusterPlan) -> list[str]:
    """The hosts that write into checkpoint_dir: the chief's, and with shards every ps host."""
    writers = {plan.chief.host} | ({t.host for t in plan.tasks if t.job == "ps"} if shards_into_shared_dir(plan)
                                   else set())
    return [h.name for h in plan.hosts if h.name in writers]


def checkpoint_note(plan: ClusterPlan) -> str:
    tr = plan.training
    if plan.uses_user_command:
        return "checkpoints: your program's own (checkpoint_dir and shared_checkpoint_dir are for the built-in trainers)"
    where = tr.checkpoint_dir
    absolute = posixpath.isabs(where)
    chief = plan.chief.host
    if shards_into_shared_dir(plan):
        hosts = ", ".join(checkpoint_hosts(plan))
        if not absolute:
            return (f"checkpoints: shared_checkpoint_dir = true with a relative checkpoint_dir ({where!r}): every ps "
                    f"writes its shard under the chief's run dir path, which is one directory only if {hosts} share "
                    "their workdir; set an absolute checkpoint_dir on storage they share")
        return (f"checkpoints: every ps writes its own shard into {where} (shared_checkpoint_dir = true): it must be "
                f"one directory on storage {hosts} share (`tfcluster check` verifies they see the same one)")
    if tr.shared_checkpoint_dir:
        return (f"checkpoints: {plan.mode} writes whole checkpoints from the chief (on {chief}) into "
                f"{where if absolute else 'its host run dir, ' + where}; shared_checkpoint_dir changes nothing here")
    if absolute:
        return f"checkpoints: written whole by the chief (on {chief}) into {where}"
    hint = (" (on storage every ps host shares, an absolute checkpoint_dir with shared_checkpoint_dir = true has "
            "every ps write its own shard)" if plan.mode in SHARDED_MODES and any(t.job == "ps" for t in plan.tasks)
            else "")
    return f"checkpoints: written whole by the chief into {where}/ in its host's own run dir (on {chief}){hint}"
