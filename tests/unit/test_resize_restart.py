"""orchestrator/run/resize_restart.py: which kept tasks a resize restarts per mode (in-graph's client, the
mirrored group, every kept task of synchronous between-graph and parameter-server-strategy), the kept-first order,
the steps a `checkpoint` file and a progress event say, and the lines the CLI and the dashboard show.
Plans are built from real hosts files (local transport: no host is reached)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.plan.from_file import plan_file
from orchestrator.plan.model import ClusterPlan
from orchestrator.plan.resize_diff import plan_resize
from orchestrator.run.resize_restart import (
    Progress,
    checkpoint_step,
    event_step,
    kept_first,
    mode_restarts,
    restart_lines,
    seen,
)

MLP = 'model = "mlp"\ncheckpoint_every_steps = 200\ncheckpoint_every_secs = 30.0'
SYNC = MLP + "\nsync_replicas = true"


def _plan(path: Path, mode: str, roles: list[list[str]], training: str = MLP) -> ClusterPlan:
    out = ["[cluster]", 'name = "demo"', f'mode = "{mode}"', "base_port = 23000", "", "[training]", training, ""]
    for i, r in enumerate(roles):
        out += ["[[hosts]]", f'name = "m{i}"', f'address = "127.0.0.{i + 2}"', 'transport = "local"',
                f'workdir = "{path.parent}/m{i}"', f"roles = {r!r}".replace("'", '"'), ""]
    path.write_text("\n".join(out))
    return plan_file(path)


@pytest.mark.parametrize(("mode", "roles", "training", "restarts"), [
    ("in-graph", [["ps", "chief"], ["worker"]], MLP, ["chief:0"]),
    ("multi-worker-mirrored", [["worker"], ["worker"]], MLP, ["worker:0", "worker:1"]),
    ("multi-worker-mirrored", [["chief"], ["worker"]], MLP, ["chief:0", "worker:0"]),
    ("between-graph", [["ps"], ["worker"]], MLP, []),
    ("between-graph", [["ps"], ["worker"]], SYNC, ["ps:0", "worker:0"]),  # the ps too: fresh accumulators
    ("between-graph", [["ps", "chief"], ["worker"]], SYNC, ["chief:0", "ps:0", "worker:0"]),
    ("parameter-server-strategy", [["ps", "chief"], ["worker"]], MLP, ["chief:0", "ps:0", "worker:0"]),
    ("in-graph", [["ps", "chief"], ["worker"]], 'command = "python prog.py"', []),  # the user's --restart-all
    ("between-graph", [["ps"], ["worker"]], 'command = "python prog.py"\nsync_replicas = true', []),
])
def test_what_a_grown_run_restarts(tmp_path: Path, mode: str, roles: list[list[str]], training: str,
                                   restarts: list[str]) -> None:
    change = plan_resize(_plan(tmp_path / "a.toml", mode, roles, training),
                         _plan(tmp_path / "b.toml", mode, [*roles, ["worker"]], training))
    assert mode_restarts(change) == restarts
    # Every restarting mode but in-graph restarts the kept tasks before a new worker is launched.
    assert kept_first(change.old) == (bool(restarts) and mode != "in-graph")
    assert bool(restart_lines(change, None)) == bool(restarts)


def test_a_synchronous_resize_says_the_new_aggregation(tmp_path: Path) -> None:
    """replicas_to_aggregate follows the new count of trainers (the chief and the workers), less the backup
    workers; a value the file fixes stays (a resize keeps `[training]`)."""
    roles = [["ps", "chief"], ["worker"]]
    said = {}
    for name, training in (("plain", SYNC), ("backup", SYNC + "\nbackup_workers = 1"),
                           ("fixed", SYNC + "\nreplicas_to_aggregate = 2")):
        change = plan_resize(_plan(tmp_path / f"{name}-a.toml", "between-graph", roles, training),
                             _plan(tmp_path / f"{name}-b.toml", "between-graph", [*roles, ["worker"]], training))
        said[name] = restart_lines(change, None)[0]
    assert said["plain"] == ("chief:0, ps:0, worker:0 restart with the new cluster (2 workers): the ps with fresh "
                             "synchronous accumulators (3 of 3 replicas' gradients per update), every trainer from "
                             "the chief's last checkpoint")
    assert "(2 of 3 replicas' gradients per update)" in said["backup"]
    assert "(2 of 3 replicas' gradients per update)" in said["fixed"]


def test_a_shrunk_ps_strategy_run_restarts_every_task_that_stays(tmp_path: Path) -> None:
    roles = [["ps", "chief"], ["worker"], ["worker"]]
    change = plan_resize(_plan(tmp_path / "a.toml", "parameter-server-strategy", roles),
                         _plan(tmp_path / "b.toml", "parameter-server-strategy", roles[:2]))
    assert change.removed == ("worker:1",) and mode_restarts(change) == ["chief:0", "ps:0", "worker:0"]
    assert restart_lines(change, None) == [
        "chief:0, ps:0, worker:0 restart with the new cluster (1 workers): the coordinator's cluster is fixed when "
        "it starts, its ps and workers start with it, and it resumes from its last checkpoint",
        "steps lost: at most those since the last checkpoint (a checkpoint every 200 steps or 30 s, whichever "
        "comes first)"]


def test_a_shrunk_mirrored_group_restarts_what_stays(tmp_path: Path) -> None:
    roles = [["worker"], ["worker"], ["worker"]]
    change = plan_resize(_plan(tmp_path / "a.toml", "multi-worker-mirrored", roles),
                         _plan(tmp_path / "b.toml", "multi-worker-mirrored", roles[:2]))
    assert change.removed == ("worker:2",) and mode_restarts(change) == ["worker:0", "worker:1"]
    assert "(2 workers)" in restart_lines(change, None)[0]


def test_the_steps_said(tmp_path: Path) -> None:
    assert checkpoint_step('model_checkpoint_path: "model.ckpt-120"\nall_model_checkpoint_paths: "x-1"\n') == 120
    assert checkpoint_step('model_checkpoint_path: "ckpt-50"\n') == 50
    assert checkpoint_step("") is None and checkpoint_step('model_checkpoint_path: "weird"') is None
    assert event_step('{"kind": "progress", "global_step": 437}\n') == 437
    assert event_step("") is None and event_step('{"global_step": "x"}') is None
    change = plan_resize(_plan(tmp_path / "a.toml", "in-graph", [["ps", "chief"], ["worker"]]),
                         _plan(tmp_path / "b.toml", "in-graph", [["ps", "chief"], ["worker"], ["worker"]]))
    said = {p: restart_lines(change, p)[1] for p in (Progress(400, 437), Progress(None, 12), Progress(), None)}
    assert said[Progress(400, 437)].endswith("(the last checkpoint was at step 400, the run is at step 437: "
                                             "37 steps since)")
    assert said[Progress(None, 12)].endswith("(no checkpoint yet; the run is at step 12)")
    assert said[Progress()] == said[None]
    assert said[None].endswith("(a checkpoint every 200 steps or 30 s, whichever comes first)")


def test_a_run_is_at_least_at_its_last_checkpoint() -> None:
    """The last progress event can be older than a checkpoint saved since (a progress interval apart)."""
    assert seen(50, 45) == Progress(50, 50)
    assert seen(50, 61) == Progress(50, 61)
    assert seen(None, 12) == Progress(None, 12) and seen(50, None) == Progress(50, None)
