"""What grows with the cluster stays O(hosts) per file: the run record keeps the plan compact (each
task's TF_CONFIG derived again on load) and each host's run.json has only its own tasks in full."""

from __future__ import annotations

import json
from dataclasses import asdict

from orchestrator.config.schema import Config
from orchestrator.plan.from_file import plan_config
from orchestrator.plan.model import ClusterPlan
from orchestrator.run.run_file import OWN_HOST_ONLY, RunFiles
from tests.plans import tiny_plan


def _plan(hosts: int) -> ClusterPlan:
    return plan_config(Config.model_validate({
        "hosts": [{"name": f"h{i}", "address": f"10.0.{i // 200}.{i % 200 + 1}", "roles": ["ps", "worker"]}
                  for i in range(hosts)],
        "training": {"command": "python train.py --job {job} --task {task}"},
    }))


def test_compact_plan_round_trips_and_stays_small() -> None:
    for plan in (_plan(3), _plan(64), tiny_plan(mode="in-graph", roles=(("chief",), ("ps",), ("worker",), ("worker",)))):
        compact = plan.to_json(compact=True)
        assert ClusterPlan.from_json(json.loads(json.dumps(compact))) == plan
        assert ClusterPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan  # older records decode too
        assert all("tf_config" not in t and "TF_CONFIG" not in t["env"] for t in compact["tasks"])
    full, compact_size = len(json.dumps(_plan(64).to_json())), len(json.dumps(_plan(64).to_json(compact=True)))
    assert compact_size * 4 < full  # the repeated cluster spec is what made it O(hosts^2)


def test_a_task_whose_tf_config_is_not_the_standard_one_is_kept() -> None:
    plan = _plan(2)
    odd = plan.tasks[0]
    odd.tf_config["task"] = {"type": "ps", "index": 7}  # (frozen dataclass, mutable dict: a hand-made plan)
    odd.env["TF_CONFIG"] = "{}"
    data = plan.to_json(compact=True)["tasks"][0]
    assert data["tf_config"]["task"]["index"] == 7 and data["env"]["TF_CONFIG"] == "{}"
    assert ClusterPlan.from_json(json.loads(json.dumps(plan.to_json(compact=True)))).tasks[0] == odd


def test_each_host_gets_its_own_tasks_in_full_and_the_others_without_cluster_wide_fields() -> None:
    plan = _plan(8)
    run_data = {"run_id": "r1", "created": 1.5, "supervisor": {"grace": 10.0}}
    files = RunFiles(run_data, plan)
    full = json.loads(json.dumps(plan.to_json()))
    for host in ("h0", "h5"):
        got = json.loads(files.for_host(host))
        assert {k: v for k, v in got.items() if k != "plan"} == run_data
        assert {k: v for k, v in got["plan"].items() if k != "tasks"} == {k: v for k, v in full.items() if k != "tasks"}
        for task, data in zip(plan.tasks, got["plan"]["tasks"], strict=True):
            expected = json.loads(json.dumps(asdict(task)))
            if task.host == host:
                assert data == expected
            else:
                assert data == {k: v for k, v in expected.items() if k not in OWN_HOST_ONLY}
    sizes = {n: len(RunFiles(run_data, _plan(n)).for_host("h0")) for n in (16, 64)}
    assert sizes[64] < 6 * sizes[16]  # O(hosts) per host, not O(hosts^2)
