"""tfcluster's Slurm layout against TensorFlow's own SlurmClusterResolver inside real allocations of the
three-node test cluster (testkit/slurm.py), with real TensorFlow in every rank: the resolver, reading the
environment Slurm gives the step, names the same job:task for every rank and puts each job's tasks on the
same nodes as `slurm_plan_file` for that allocation (its nodes and NodeAddr read from `scontrol show node`).
Once in the step that `tfcluster export slurm`'s script starts (the resolver in every rank), once in a step
Slurm lays out by itself (each rank's Slurm environment captured, the resolver run on it here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.plan.from_file import slurm_plan_file
from orchestrator.plan.slurm import SlurmNode, SlurmPlan
from testkit.slurm import SlurmCluster
from tests import requires

pytestmark = pytest.mark.integration
requires.tensorflow()
REPO = Path(__file__).resolve().parents[2]

# Every rank: the resolver's view of the step, as JSON on one line; the job counts from argv, or from the
# TF_CONFIG the exported script set. CPU only: the resolver is told of one (fake) GPU per task of the busiest
# node, since it cannot split none.
PROBE = '''\
import json, os, sys
import tensorflow as tf
gpus = int(sys.argv[2])
if sys.argv[1] == "from-tf-config":
    jobs = {job: len(targets) for job, targets in json.loads(os.environ["TF_CONFIG"])["cluster"].items()}
else:
    jobs = json.loads(sys.argv[1])
resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(jobs=jobs, gpus_per_node=gpus, auto_set_gpu=False)
spec = resolver.cluster_spec().as_dict()
ours = json.loads(os.environ["TF_CONFIG"])["task"] if "TF_CONFIG" in os.environ else None
print(json.dumps({"rank": int(os.environ["SLURM_PROCID"]), "node": os.environ["SLURMD_NODENAME"],
                  "task": list(resolver.get_task_info()), "spec": spec, "tf_config_task": ours}))
'''


def allocation_plan(cluster: SlurmCluster, hosts: Path) -> SlurmPlan:
    nodes = [SlurmNode(name, address) for name, address in cluster.node_addresses().items()]
    return slurm_plan_file(hosts, nodes)


def assert_same_layout(plan: SlurmPlan, probes: list[dict[str, object]]) -> None:
    assert sorted(p["rank"] for p in probes) == list(range(len(plan.ranks)))  # type: ignore[type-var]
    hosts = {job: [t.host for t in plan.ranks if t.job == job] for job in plan.plan.cluster_spec}
    for probe in probes:
        task = plan.ranks[probe["rank"]]  # type: ignore[index]
        assert probe["task"] == [task.job, task.index], probe
        assert probe["node"] == task.host, probe  # where Slurm really ran the rank
        resolver_hosts = {job: [a.split(":")[0] for a in addresses]
                          for job, addresses in probe["spec"].items()}  # type: ignore[attr-defined]
        assert resolver_hosts == hosts, probe


def test_the_exported_step_is_laid_out_as_the_resolver_reads_it(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """5 tasks (chief, ps, 3 workers) on 3 nodes: 2, 2, 1. Every task ends by itself (success = all-workers)."""
    (tmp_path / "probe.py").write_text(PROBE)
    hosts = slurm_cluster.hosts_toml(
        tmp_path / "hosts.toml", slurm={"nodes": 3, "workers": 3, "ps": 1, "chief": True},
        training={"command": "{python} probe.py from-tf-config 2", "success": "all-workers"})
    script = tmp_path / "job.sbatch"
    exported = subprocess.run([sys.executable, "-m", "tfcluster", "export", "slurm", str(hosts)], cwd=REPO,
                              capture_output=True, text=True, check=True, timeout=60)
    script.write_text(exported.stdout)
    job = slurm_cluster.submit(script, cwd=tmp_path)
    fields = slurm_cluster.wait_job(job, timeout=240)
    assert fields["JobState"] == "COMPLETED", (fields, (tmp_path / f"slurm-{job}.out").read_text())
    logs = sorted((tmp_path / "work" / "runs").glob(f"*-slurm-{job}/*/logs/*.log"))
    probes = [json.loads(log.read_text().splitlines()[-1]) for log in logs]
    plan = allocation_plan(slurm_cluster, hosts)
    assert plan.tasks_per_node == (2, 2, 1)
    assert_same_layout(plan, probes)
    assert all(p["tf_config_task"] == {"type": p["task"][0], "index": p["task"][1]} for p in probes)


def test_a_step_slurm_lays_out_alone_agrees_with_the_plan(slurm_cluster: SlurmCluster, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """6 tasks on 3 nodes, 2 each (`srun --ntasks-per-node=2`): no hostfile, Slurm's own block layout."""
    tf = requires.tensorflow()
    hosts = slurm_cluster.hosts_toml(tmp_path / "hosts.toml", slurm={"nodes": 3, "workers": 4, "ps": 2})
    plan = allocation_plan(slurm_cluster, hosts)
    jobs = {job: len(addresses) for job, addresses in plan.plan.cluster_spec.items()}
    capture = "import json, os; print(json.dumps({k: v for k, v in os.environ.items() if k.startswith('SLURM')}))"
    res = slurm_cluster.run("srun", "--nodes=3", "--ntasks-per-node=2", f"--output={tmp_path}/rank-%t.json",
                            sys.executable, "-c", capture, timeout=60)
    assert res.returncode == 0, res.stderr
    probes = []
    for output in sorted(tmp_path.glob("rank-*.json")):
        step_env = json.loads(output.read_text())
        for name, value in step_env.items():
            monkeypatch.setenv(name, value)
        resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(jobs=jobs, gpus_per_node=2, auto_set_gpu=False)
        spec = resolver.cluster_spec().as_dict()  # sets the task info too
        probes.append({"rank": int(step_env["SLURM_PROCID"]), "node": step_env["SLURMD_NODENAME"],
                       "task": list(resolver.get_task_info()), "spec": spec})
    assert_same_layout(plan, probes)
