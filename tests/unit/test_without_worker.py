"""The plan less one worker (orchestrator/plan/without_worker.py) as plan_resize sees it: the last worker goes
with nobody restarted; a middle one's index is taken by the last worker (one moved task, its TF_CONFIG,
device and `{task}` value renumbered); a host left empty leaves; the chief worker and a ps are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.plan.from_file import plan_file
from orchestrator.plan.model import ClusterPlan
from orchestrator.plan.resize_diff import ResizeRefused, plan_resize
from orchestrator.plan.without_worker import plan_without, removable


def _plan(tmp_path: Path, workers: list[int]) -> ClusterPlan:
    """A ps host, then one host per entry running that many workers (no GPUs)."""
    out = ["[cluster]", 'name = "demo"', "base_port = 23000", "", "[training]",
           'command = "{python} prog.py {job} {task}"', ""]
    for i, n in enumerate([0, *workers]):
        out += ["[[hosts]]", f'name = "m{i}"', f'address = "127.0.0.{i + 2}"', 'transport = "local"',
                f'workdir = "{tmp_path}/m{i}"', f"roles = {json.dumps(['worker'] if n else ['ps'])}",
                *([f"workers = {n}"] if n > 1 else []), ""]
    path = tmp_path / "hosts.toml"
    path.write_text("\n".join(out))
    return plan_file(path)


def test_the_last_worker_goes_and_nobody_restarts(tmp_path: Path) -> None:
    old = _plan(tmp_path, [1, 1, 1])
    change = plan_resize(old, plan_without(old, "worker:2"))
    assert (change.removed, change.moved, change.added) == (("worker:2",), (), ())
    assert change.hosts_removed == ("m3",)
    assert len(change.new.cluster_spec["worker"]) == 2
    assert change.new.task("worker", 1).port == old.task("worker", 1).port  # kept tasks keep their ports


def test_a_middle_worker_is_replaced_by_the_last_one(tmp_path: Path) -> None:
    old = _plan(tmp_path, [1, 1, 1])
    change = plan_resize(old, plan_without(old, "worker:1"))
    assert change.lines() == ["worker:1 moves m2 -> m3 (restarted there)", "worker:2 on m3 is stopped",
                              "host m2 leaves"]
    moved = change.new.task("worker", 1)
    assert moved.host == "m3" and moved.device.startswith("/job:worker/task:1/")
    assert moved.env["TFCLUSTER_TASK"] == "1" and moved.env["TFCLUSTER_ARG_TASK"] == "1"
    config = json.loads(moved.env["TF_CONFIG"])
    assert config["task"] == {"type": "worker", "index": 1}
    assert config["cluster"]["worker"] == [f"{t.address}:{t.port}" for t in (change.new.task("worker", 0), moved)]
    assert moved.port not in {t.port for t in old.tasks}  # a moved task's port is fresh


def test_a_host_keeping_a_task_stays(tmp_path: Path) -> None:
    old = _plan(tmp_path, [1, 2])
    change = plan_resize(old, plan_without(old, "worker:2"))
    assert change.removed == ("worker:2",) and not change.hosts_removed
    assert change.new.host("m2").tasks == ("worker:1",)


@pytest.mark.parametrize(("name", "why"), [("worker:0", "not a worker that may go"), ("ps:0", "not a worker"),
                                           ("worker:9", "not a task of the run")])
def test_the_chief_worker_a_ps_and_an_unknown_task_are_refused(tmp_path: Path, name: str, why: str) -> None:
    old = _plan(tmp_path, [1, 1])
    assert not removable(old, name)
    with pytest.raises(ResizeRefused, match=why):
        plan_without(old, name)
