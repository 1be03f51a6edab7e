"""`tfcluster export slurm`'s script, submitted with the real sbatch to the three-node test cluster
(testkit/slurm.py) and run by real Slurm daemons: the built-in model with real TensorFlow in between-graph
mode (1 ps, 2 workers), and a user's program whose ps serves forever (as TF1's `server.join()` does; a plain
TCP server here, TensorFlow costs this 2-core machine 10 s more and proves nothing more), each to a
COMPLETED job, with every rank on its planned node dialling the others at their NodeAddr, and no process
left."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.slurm import SlurmCluster
from tests import requires
from tests.helpers.procs import cmdline
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.integration
requires.tensorflow()
REPO = Path(__file__).resolve().parents[2]


def export(hosts: Path) -> Path:
    res = subprocess.run([sys.executable, "-m", "tfcluster", "export", "slurm", str(hosts)], cwd=REPO, check=False,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    script = hosts.with_name("job.sbatch")
    script.write_text(res.stdout)
    return script


def run_to_the_end(cluster: SlurmCluster, hosts: Path, timeout: float) -> Path:
    """Export, submit, see the job COMPLETED and nothing of it left; its run dir (the nodes share it here)."""
    job = cluster.submit(export(hosts), cwd=hosts.parent)
    fields = cluster.wait_job(job, timeout=timeout)
    output = (hosts.parent / f"slurm-{job}.out").read_text()
    assert fields["JobState"] == "COMPLETED" and fields["ExitCode"] == "0:0", (fields, output)
    wait_for(lambda: not cluster.job_processes(job), 30, f"slurmstepd and every task process of job {job} gone",
             explain=lambda: str([cmdline(p) for p in cluster.job_processes(job)]))
    return hosts.parent / "work" / "runs" / f"slurmtest-slurm-{job}"


def test_the_builtin_model_trains_to_a_completed_job(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    hosts = slurm_cluster.hosts_toml(tmp_path / "hosts.toml", slurm={"nodes": 3, "workers": 2, "time": "10"},
                                     training={"steps": 300, "batch_size": 32, "checkpoint_every_secs": 3600.0})
    run = run_to_the_end(slurm_cluster, hosts, timeout=300)
    assert sorted(p.name for p in run.iterdir()) == ["n1", "n2", "n3"]  # rank 0 (ps) on n1, the workers on n2, n3
    assert (run / "n1" / "logs" / "ps-0.log").exists()
    chief_log = (run / "n2" / "logs" / "worker-0.log").read_text()
    assert "training done" in chief_log, chief_log[-2000:]
    plan = json.loads((run / "n3" / "run.json").read_text())["plan"]
    addresses = {job: [a.rsplit(":", 1)[0] for a in targets] for job, targets in plan["cluster_spec"].items()}
    assert addresses == {"ps": ["127.0.0.11"], "worker": ["127.0.0.12", "127.0.0.13"]}  # NodeAddr, not names
    assert (run / "n3" / "run.json").stat().st_mode & 0o077 == 0  # private from its first byte
    # Between-graph is asynchronous: the last of the 300 updates may be either worker's, and the other one sees
    # the step one short when it stops; the run reached 300 when one of them reports it.
    progress = [json.loads(line) for node, worker in (("n2", 0), ("n3", 1))
                for line in (run / node / "events" / f"worker-{worker}.jsonl").read_text().splitlines()]
    assert max(e.get("global_step") or 0 for e in progress if e["kind"] == "progress") >= 300


# The user's program: a ps that serves until it is killed, as TF1's examples do, and counts the workers that
# said hello; workers that reach it at the address {ps_hosts} gives, print what they were told and say hello.
# The chief (worker 0) ends once both did, as a chief ends after its workers' steps. Nothing of tfcluster in it.
PROGRAM = '''\
import json, os, socket, socketserver, sys, time
job, task, ps_hosts = sys.argv[1], int(sys.argv[2]), sys.argv[3]
config = json.loads(os.environ["TF_CONFIG"])
assert config["task"] == {"type": job, "index": task}, config
host, port = ps_hosts.rsplit(":", 1)
if job == "ps":
    said_hello = set()
    class Hello(socketserver.StreamRequestHandler):
        def handle(self):
            said_hello.update({self.rfile.readline()} - {b""})  # a bare connect (is it up?) says nothing
            self.wfile.write(b"%d\\n" % len(said_hello))
    server = socketserver.TCPServer(("", int(port)), Hello)
    print("serving", ps_hosts, flush=True)
    server.serve_forever()
def hello():
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"worker %d\\n" % task)
        return int(s.makefile().readline())
while socket.socket().connect_ex((host, int(port))) != 0:
    time.sleep(0.2)  # retries until the ps serves
print(f"{job} {task} on {os.environ['SLURMD_NODENAME']} sees ps at {ps_hosts}", flush=True)
while hello() < 2 and task == 0:
    time.sleep(0.2)  # asks again until both workers said hello
'''


def test_a_users_program_ends_with_its_chief_even_when_its_ps_serves_forever(slurm_cluster: SlurmCluster,
                                                                              tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(PROGRAM)
    hosts = slurm_cluster.hosts_toml(
        tmp_path / "hosts.toml", slurm={"nodes": 2, "workers": 2, "ps": 1},
        training={"command": "{python} train.py {job} {task} {ps_hosts}"})
    run = run_to_the_end(slurm_cluster, hosts, timeout=180)
    ps_target = json.loads((run / "n1" / "run.json").read_text())["plan"]["cluster_spec"]["ps"][0]
    assert ps_target.startswith("127.0.0.11:")
    assert "serving" in (run / "n1" / "logs" / "ps-0.log").read_text()
    assert (run / "n1" / "logs" / "worker-0.log").read_text() == f"worker 0 on n1 sees ps at {ps_target}\n"
    assert (run / "n2" / "logs" / "worker-1.log").read_text() == f"worker 1 on n2 sees ps at {ps_target}\n"
