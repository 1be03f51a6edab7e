"""Config -> ClusterPlan: ports, devices, CUDA_VISIBLE_DEVICES, chief rules, commands, warnings, PS load."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.load import load_config
from orchestrator.config.schema import Config
from orchestrator.errors import ConfigError
from orchestrator.plan.from_file import plan_config
from orchestrator.plan.model import ClusterPlan, TaskPlan
from orchestrator.plan.ps_load import GLOBAL_STEP_BYTES, estimate_ps_load, trainer_count
from training.cluster.placement import greedy_assign
from training.models.sizes import mlp_shapes, wide_shapes
from training.run.layout import host_module

REPO = Path(__file__).resolve().parents[2]


def host(name: str, address: str, roles: list[str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "address": address, "roles": roles, **extra}


def plan_of(hosts: list[dict[str, Any]], **sections: dict[str, Any]) -> ClusterPlan:
    return plan_config(Config.model_validate({"hosts": hosts, **sections}))


GPU_CLUSTER = [
    host("ps-0", "10.0.0.20", ["ps"]),
    host("ps-1", "10.0.0.21", ["ps"]),
    host("gpu-a", "10.0.0.11", ["worker"], gpus=[0, 1]),
    host("gpu-b", "10.0.0.12", ["worker"], gpus=[2, 5]),
]


def test_ports_are_unique_across_the_cluster_and_start_at_base_port() -> None:
    plan = plan_of(
        [*GPU_CLUSTER, host("cpu", "10.0.0.13", ["worker", "chief"], workers=3)], cluster={"base_port": 30000}
    )
    ports = [t.port for t in plan.tasks]
    assert len(ports) == len(set(ports)) == 2 + 4 + 1 + 3
    assert sorted(ports) == list(range(30000, 30000 + len(ports)))
    # the cluster spec names exactly these address:port pairs
    spec_targets = sorted(a for job in plan.cluster_spec.values() for a in job)
    assert spec_targets == sorted(t.target for t in plan.tasks)


def test_gpu_workers_see_only_their_gpu_and_ps_run_on_cpu() -> None:
    plan = plan_of(GPU_CLUSTER)
    workers = [t for t in plan.tasks if t.job == "worker"]
    assert [(t.host, t.gpus, t.cuda_visible_devices) for t in workers] == [
        ("gpu-a", (0,), "0"), ("gpu-a", (1,), "1"), ("gpu-b", (2,), "2"), ("gpu-b", (5,), "5"),
    ]
    for i, t in enumerate(workers):
        # CUDA_VISIBLE_DEVICES leaves one GPU visible, so inside the task it is always GPU:0
        assert t.device == f"/job:worker/task:{i}/device:GPU:0"
        assert t.env["CUDA_VISIBLE_DEVICES"] == t.cuda_visible_devices
    for t in plan.tasks:
        if t.job == "ps":
            assert t.gpus == ()
            assert t.cuda_visible_devices == "" and t.env["CUDA_VISIBLE_DEVICES"] == ""
            assert t.device == f"/job:ps/task:{t.index}/device:CPU:0"


def test_cpu_workers_from_workers_count() -> None:
    plan = plan_of([host("ps", "10.0.0.20", ["ps"]), host("cpu", "10.0.0.11", ["worker"], workers=3)])
    workers = [t for t in plan.tasks if t.job == "worker"]
    assert [t.index for t in workers] == [0, 1, 2]
    assert all(t.device.endswith("device:CPU:0") and t.cuda_visible_devices == "" for t in workers)


def test_between_graph_without_chief_role_worker_0_is_chief() -> None:
    plan = plan_of(GPU_CLUSTER)
    assert "chief" not in plan.cluster_spec
    assert [t.name for t in plan.tasks if t.is_chief] == ["worker:0"]
    assert plan.chief.job == "worker" and plan.chief.index == 0


def test_between_graph_chief_role_gets_a_chief_job_and_the_hosts_first_gpu() -> None:
    hosts = [host("ps", "10.0.0.20", ["ps"]), host("gpu-a", "10.0.0.11", ["chief", "worker"], gpus=[3, 4, 7])]
    plan = plan_of(hosts)
    assert plan.cluster_spec["chief"] == [plan.task("chief", 0).target]
    chief = plan.task("chief", 0)
    assert chief.is_chief and chief.gpus == (3,) and chief.device == "/job:chief/task:0/device:GPU:0"
    assert [t.gpus for t in plan.tasks if t.job == "worker"] == [(4,), (7,)]
    assert [t.name for t in plan.tasks if t.is_chief] == ["chief:0"]


def test_between_graph_chief_only_host_on_cpu() -> None:
    plan = plan_of([*GPU_CLUSTER, host("boss", "10.0.0.10", ["chief"])])
    chief = plan.task("chief", 0)
    assert chief.host == "boss" and chief.gpus == () and chief.cuda_visible_devices == ""
    assert len([t for t in plan.tasks if t.job == "worker"]) == 4


def test_chief_taking_the_only_gpu_leaves_no_worker() -> None:
    with pytest.raises(ConfigError, match=r"hosts\[1\]\.gpus: no worker task left"):
        plan_of([host("ps", "10.0.0.20", ["ps"]), host("g", "10.0.0.11", ["chief", "worker"], gpus=[0])])


FOUR_GPUS = [0, 1, 2, 3]


def test_gpus_per_task_gives_each_worker_consecutive_gpus() -> None:
    hosts = [host("ps", "10.0.0.20", ["ps"]), host("g", "10.0.0.11", ["worker"], gpus=FOUR_GPUS, gpus_per_task=2)]
    plan = plan_of(hosts)
    workers = [t for t in plan.tasks if t.job == "worker"]
    assert [(t.gpus, t.cuda_visible_devices, t.device) for t in workers] == [
        ((0, 1), "0,1", "/job:worker/task:0/device:GPU:0"), ((2, 3), "2,3", "/job:worker/task:1/device:GPU:0")]
    assert [t.env["CUDA_VISIBLE_DEVICES"] for t in workers] == ["0,1", "2,3"]
    # the built-in between-graph trainer builds its graph on GPU:0: the plan says the others idle
    assert plan.warnings == ("host g: each task sees 2 GPUs, but the built-in between-graph trainer computes on "
                             "its GPU:0 only (in-graph and multi-worker-mirrored use them all)",)
    assert plan_of(hosts, training={"command": "python train.py"}).warnings == ()


def test_multi_worker_mirrored_gives_a_task_all_of_its_hosts_gpus_by_default() -> None:
    hosts = [host("a", "10.0.0.11", ["worker"], gpus=FOUR_GPUS), host("b", "10.0.0.12", ["worker"], gpus=[4, 5, 6, 7])]
    plan = plan_of(hosts, cluster={"mode": "multi-worker-mirrored"})
    assert [(t.name, t.host, t.gpus, t.cuda_visible_devices) for t in plan.tasks] == [
        ("worker:0", "a", (0, 1, 2, 3), "0,1,2,3"), ("worker:1", "b", (4, 5, 6, 7), "4,5,6,7")]
    assert plan.task("worker", 1).device == "/job:worker/task:1/device:GPU:0"
    assert plan.warnings == ()
    # gpus_per_task says otherwise: a worker per GPU, as in the other modes
    split = plan_of([host("a", "10.0.0.11", ["worker"], gpus=FOUR_GPUS, gpus_per_task=1)],
                    cluster={"mode": "multi-worker-mirrored"})
    assert [t.gpus for t in split.tasks] == [(0,), (1,), (2,), (3,)]


def test_a_training_chief_takes_its_gpus_per_task_first() -> None:
    hosts = [host("ps", "10.0.0.20", ["ps"]),
             host("g", "10.0.0.11", ["chief", "worker"], gpus=[0, 1, 2, 3, 4, 5], gpus_per_task=2)]
    plan = plan_of(hosts, training={"command": "python train.py"})
    assert [(t.name, t.gpus) for t in plan.tasks] == [
        ("chief:0", (0, 1)), ("ps:0", ()), ("worker:0", (2, 3)), ("worker:1", (4, 5))]
    mirrored = plan_of([host("g", "10.0.0.11", ["chief", "worker"], gpus=FOUR_GPUS),
                        host("h", "10.0.0.12", ["worker"], gpus=FOUR_GPUS)], cluster={"mode": "multi-worker-mirrored"})
    assert [(t.name, t.host, t.gpus) for t in mirrored.tasks] == [
        ("chief:0", "g", (0, 1, 2, 3)), ("worker:0", "h", (0, 1, 2, 3))]


def test_a_chief_taking_all_gpus_by_default_says_how_to_leave_some() -> None:
    with pytest.raises(ConfigError) as info:
        plan_of([host("g", "10.0.0.11", ["chief", "worker"], gpus=FOUR_GPUS)], cluster={"mode": "multi-worker-mirrored"})
    assert info.value.key == "hosts[0].gpus_per_task"
    assert "no worker task left: the chief takes all 4 GPUs of `g` (multi-worker-mirrored gives a task all of its " \
           "host's GPUs unless gpus_per_task says otherwise)" in info.value.message


@pytest.mark.parametrize(("hosts", "mode", "key", "fragment"), [
    ([host("ps", "10.0.0.20", ["ps"]), host("w", "10.0.0.11", ["worker"], workers=2, gpus_per_task=2)],
     "between-graph", "hosts[1].gpus_per_task", "gpus_per_task = 2 but `w` lists no GPU"),
    ([host("ps", "10.0.0.20", ["ps"]), host("w", "10.0.0.11", ["worker"], gpus=[0, 1, 2], gpus_per_task=2)],
     "between-graph", "hosts[1].gpus_per_task",
     "gpus_per_task = 2 does not divide the 3 GPUs `w` lists (gpus = [0, 1, 2]): use one of 1, 3"),
    ([host("ps", "10.0.0.20", ["ps"], gpus=[0, 1], gpus_per_task=2), host("w", "10.0.0.11", ["worker"])],
     "between-graph", "hosts[0].gpus_per_task", "`ps` runs only a ps task, and ps tasks never get GPUs"),
    ([host("ps", "10.0.0.20", ["ps"]), host("boss", "10.0.0.10", ["chief"]),
      host("w", "10.0.0.11", ["worker"], gpus=[0, 1], gpus_per_task=2)],
     "parameter-server-strategy", "hosts[2].gpus_per_task",
     "the built-in parameter-server-strategy trainer runs one replica per worker task"),
    ([host("a", "10.0.0.11", ["worker"], gpus=FOUR_GPUS), host("b", "10.0.0.12", ["worker"], gpus=[0, 1])],
     "multi-worker-mirrored", "hosts[1].gpus_per_task",
     "multi-worker-mirrored needs as many replicas in every task (TensorFlow's all-reduce counts every task's "
     "devices as its own): a task of `a` has 4 GPUs, one of `b` 2 GPUs"),
    ([host("boss", "10.0.0.10", ["chief"]), host("a", "10.0.0.11", ["worker"], gpus=[0, 1])],
     "multi-worker-mirrored", "hosts[1].gpus_per_task", "a task of `boss` has the CPU (one replica), one of `a` 2 GPUs"),
], ids=["without-gpus", "not-a-divisor", "ps-only", "ps-strategy-builtin", "mirrored-unequal", "mirrored-cpu-chief"])
def test_gpus_per_task_refusals_name_the_hosts_key(hosts: list[dict[str, Any]], mode: str, key: str,
                                                   fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        plan_of(hosts, cluster={"mode": mode})
    assert info.value.key == key
    assert fragment in info.value.message, info.value.message


def test_in_graph_client_is_chief_on_cpu_on_the_chief_host() -> None:
    hosts = [*GPU_CLUSTER, host("client", "10.0.0.10", ["chief"])]
    plan = plan_of(hosts, cluster={"mode": "in-graph"})
    chief = plan.task("chief", 0)
    assert chief.host == "client" and chief.is_chief and chief.gpus == ()
    assert chief.device == "/job:chief/task:0/device:CPU:0"
    # every worker keeps its GPU: the client does not take one
    assert [t.gpus for t in plan.tasks if t.job == "worker"] == [(0,), (1,), (2,), (5,)]
    assert [t.name for t in plan.tasks if t.is_chief] == ["chief:0"]


def test_in_graph_without_chief_role_runs_the_client_on_the_first_worker_host() -> None:
    plan = plan_of(GPU_CLUSTER, cluster={"mode": "in-graph"})
    chief = plan.task("chief", 0)
    assert chief.host == "gpu-a" and chief.gpus == () and chief.is_chief
    assert not any(t.is_chief for t in plan.tasks if t.job == "worker")


def test_tf_config_and_env_per_task() -> None:
    plan = plan_of(GPU_CLUSTER)
    for t in plan.tasks:
        tf_config = json.loads(t.env["TF_CONFIG"])
        assert tf_config == {"cluster": plan.cluster_spec, "task": {"type": t.job, "index": t.index}}
        assert t.tf_config == tf_config
        assert (t.env["TFCLUSTER_JOB"], t.env["TFCLUSTER_TASK"], t.env["TFCLUSTER_HOST"]) == (
            t.job, str(t.index), t.host,
        )


def test_builtin_command_uses_the_hosts_python() -> None:
    hosts = [host("ps", "10.0.0.20", ["ps"], python="/usr/bin/python3.11"), host("w", "10.0.0.11", ["worker"])]
    plan = plan_of(hosts, remote={"python": "/opt/venv/bin/python"})
    assert plan.task("ps", 0).command == ["/usr/bin/python3.11", "-m", host_module("task")]
    assert plan.task("worker", 0).command == ["/opt/venv/bin/python", "-m", host_module("task")]


def _words(task: TaskPlan) -> list[str]:
    """The words a real /bin/sh makes of a task's command, in the task's environment."""
    assert task.command[:2] == ["/bin/sh", "-c"]
    probe = f"set -- {task.command[2]}\nprintf '%s\\0' \"$@\""
    out = subprocess.run(["/bin/sh", "-c", probe], env={"PATH": "/usr/bin:/bin", **task.env},
                         capture_output=True, check=True).stdout
    return out.decode().split("\0")[:-1]


def test_user_command_placeholders_become_quoted_variable_references() -> None:
    hosts = [
        host("ps", "10.0.0.20", ["ps"]),
        host("w", "10.0.0.11", ["worker"], workers=2, python="/opt/my env/python"),
    ]
    command = "{python} train.py --job {job} --task {task} --ps {ps_hosts} --workers {worker_hosts} --on {host}"
    plan = plan_of(hosts, training={"command": command}, cluster={"base_port": 24000})
    task = plan.task("worker", 1)
    assert _words(task) == [
        "/opt/my env/python", "train.py", "--job", "worker", "--task", "1",
        "--ps", "10.0.0.20:24000", "--workers", "10.0.0.11:24001,10.0.0.11:24002", "--on", "w",
    ]
    assert "/opt/my env/python" not in task.command[2]  # never pasted into the shell text
    assert task.command[2].startswith('"${TFCLUSTER_ARG_PYTHON}" train.py')


def test_user_command_value_with_shell_metacharacters_stays_one_word() -> None:
    hosts = [host("ps", "10.0.0.20", ["ps"]), host("w", "10.0.0.11", ["worker"], python="py; rm -rf /")]
    plan = plan_of(hosts, training={"command": "{python} -c pass"})
    assert _words(plan.task("worker", 0)) == ["py; rm -rf /", "-c", "pass"]


@pytest.mark.parametrize(
    ("command", "fragment", "suggestion"),
    [
        ("train.py --idx {task_index}", "unknown placeholder {task_index}", "{task}"),
        ("train.py --j {jobs}", "unknown placeholder {jobs}", "{job}"),
        ("train.py {}", "unknown placeholder {}", None),
        ("train.py {task!r}", "conversions and formats are not allowed", "{task}"),
        ("train.py {task", "expected '}'", None),
    ],
)
def test_bad_user_command_is_a_config_error(command: str, fragment: str, suggestion: str | None) -> None:
    with pytest.raises(ConfigError) as info:
        plan_of(GPU_CLUSTER, training={"command": command})
    assert info.value.key == "training.command"
    assert fragment in info.value.one_line()
    assert info.value.suggestion == suggestion


def test_backup_workers_must_leave_a_replica_to_aggregate() -> None:
    with pytest.raises(ConfigError, match=r"training.backup_workers: backup_workers = 4 .* 4 training tasks; use at most 3"):
        plan_of(GPU_CLUSTER, training={"sync_replicas": True, "backup_workers": 4})
    assert plan_of(GPU_CLUSTER, training={"sync_replicas": True, "backup_workers": 3}).tasks


def test_public_address_warns_unless_allowed() -> None:
    hosts = [host("ps", "10.0.0.20", ["ps"]), host("cloud", "8.8.4.4", ["worker"]), host("dns", "w.example", ["worker"])]
    warnings = plan_of(hosts).warnings
    assert len(warnings) == 1
    assert warnings[0].startswith("host cloud: 8.8.4.4 is a public address")
    assert plan_of(hosts, cluster={"allow_public": True}).warnings == ()


def test_private_and_loopback_addresses_do_not_warn() -> None:
    hosts = [host("ps", "127.0.0.2", ["ps"]), host("w", "192.168.1.5", ["worker"]), host("v", "fd00::5", ["worker"])]
    assert plan_of(hosts).warnings == ()


def test_ignored_gpus_and_unchecked_host_keys_warn() -> None:
    hosts = [host("ps", "10.0.0.20", ["ps"], gpus=[0]), host("w", "10.0.0.11", ["worker"])]
    plan = plan_of(hosts, ssh={"strict_host_key_checking": "no"})
    assert any(w.startswith("host ps: `gpus` is ignored") for w in plan.warnings)
    assert sum("man-in-the-middle" in w for w in plan.warnings) == 2


def test_plan_json_round_trips() -> None:
    plan = plan_of(GPU_CLUSTER, ssh={"user": "ubuntu"})
    data = json.loads(json.dumps(plan.to_json()))
    assert data["cluster_spec"] == plan.cluster_spec
    assert [t["device"] for t in data["tasks"]] == [t.device for t in plan.tasks]
    assert data["hosts"][0]["ssh"] == {"user": "ubuntu"}


def test_run_record_round_trips_gpus_and_reads_an_older_records_gpu() -> None:
    hosts = [host("ps", "10.0.0.20", ["ps"]), host("g", "10.0.0.11", ["worker"], gpus=FOUR_GPUS, gpus_per_task=2)]
    plan = plan_of(hosts)
    for compact in (False, True):
        data = json.loads(json.dumps(plan.to_json(compact=compact)))
        assert [t["gpus"] for t in data["tasks"]] == [[], [0, 1], [2, 3]]
        assert ClusterPlan.from_json(data).tasks == plan.tasks
    # a run started before tasks had several GPUs: `gpu`, an index or null
    old = json.loads(json.dumps(plan_of(GPU_CLUSTER).to_json(compact=True)))
    for task in old["tasks"]:
        gpus = task.pop("gpus")
        task["gpu"] = gpus[0] if gpus else None
    assert [t.gpus for t in ClusterPlan.from_json(old).tasks] == [(), (), (0,), (1,), (2,), (5,)]


def test_greedy_placement_fills_the_least_loaded_ps_first() -> None:
    assert greedy_assign([100, 10, 10, 50], 2) == [0, 1, 1, 1]
    assert greedy_assign([5, 5, 5], 3) == [0, 1, 2]


def test_ps_load_estimate_is_bytes_times_two_times_trainers_times_rate() -> None:
    args = {"params": 1_000_000, "shards": 4, "classes": 10}
    plan = plan_of(GPU_CLUSTER, training={"model": "wide", "model_args": args})
    estimate = estimate_ps_load(plan, steps_per_sec=5.0)
    assert estimate is not None
    sizes = [GLOBAL_STEP_BYTES, *(v.nbytes for v in wide_shapes(args))]
    expected = [0, 0]
    for size, ps in zip(sizes, greedy_assign(sizes, 2), strict=True):
        expected[ps] += size
    assert estimate.trainers == trainer_count(plan) == 4
    assert [p.variable_bytes for p in estimate.per_ps] == expected
    assert [p.bytes_per_sec for p in estimate.per_ps] == [b * 2 * 4 * 5.0 for b in expected]
    assert estimate.model_bytes == sum(v.nbytes for v in wide_shapes(args))
    assert "assumption" in estimate.one_line() and "ps:1" in estimate.one_line()


def test_between_graph_chief_counts_as_a_trainer_in_graph_client_does_not() -> None:
    hosts = [*GPU_CLUSTER, host("boss", "10.0.0.10", ["chief"])]
    assert trainer_count(plan_of(hosts)) == 5
    assert trainer_count(plan_of(hosts, cluster={"mode": "in-graph"})) == 4
    # in-graph: a tower on each GPU of a worker pulls every variable
    hosts[2] = {**hosts[2], "gpus_per_task": 2}  # gpu-a: one worker with GPUs 0 and 1
    assert trainer_count(plan_of(hosts, cluster={"mode": "in-graph"})) == 4
    assert trainer_count(plan_of(hosts)) == 4  # between-graph: that worker is one trainer


def test_no_ps_load_estimate_for_a_users_program() -> None:
    plan = plan_of(GPU_CLUSTER, training={"command": "python train.py --job {job}"})
    assert estimate_ps_load(plan, 10.0) is None


def test_example_file_loads_and_plans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # load_config reads ~/.ssh/config: never the developer's
    config = load_config(REPO / "hosts.example.toml")
    plan = plan_config(config, "hosts.example.toml")
    assert [h.name for h in plan.hosts] == ["chief", "ps-0", "ps-1", "gpu-a", "gpu-b"]
    assert sorted(t.name for t in plan.tasks) == sorted(
        ["chief:0", "ps:0", "ps:1", "worker:0", "worker:1", "worker:2", "worker:3"]
    )
    assert plan.warnings == ()
    assert plan.host("gpu-b").ssh.port == 2222
    estimate = estimate_ps_load(plan, 10.0)
    assert estimate is not None
    assert estimate.model_bytes == sum(v.nbytes for v in mlp_shapes(config.training.model_args))


def _schema_keys(model: type, prefix: str = "") -> set[str]:
    from pydantic import BaseModel

    from orchestrator.config.explain import _unwrap

    keys = set()
    for name, info in model.model_fields.items():  # type: ignore[attr-defined]
        keys.add(name)
        inner = _unwrap(info.annotation)
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            keys |= _schema_keys(inner)
    return keys


def test_example_file_documents_every_key_of_the_schema() -> None:
    text = (REPO / "hosts.example.toml").read_text()
    documented = set()
    for line in text.splitlines():
        stripped = line.lstrip("# ").split("=")[0].strip()
        if "=" in line and stripped.replace("_", "").isalnum():
            documented.add(stripped)
    missing = _schema_keys(Config) - documented - {"cluster", "ssh", "remote", "hosts", "slurm", "training"}
    assert not missing, f"hosts.example.toml does not document: {sorted(missing)}"
    # the first line that sets each key says what it does (later hosts repeat keys without comments)
    first_use: dict[str, str] = {}
    for line in text.splitlines():
        key = line.lstrip("# ").split("=")[0].strip()
        if "=" in line and key.replace("_", "").isalnum():
            first_use.setdefault(key, line)
    uncommented = [line for line in first_use.values() if "#" not in line.lstrip("# ")]
    assert not uncommented, uncommented
