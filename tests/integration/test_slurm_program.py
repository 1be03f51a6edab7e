"""A user's own program as a [slurm] run on the real three-node Slurm, through the CLI, as on SSH hosts: its
file shipped by `sync`, `[training] env` and `forward_env` in every task (the forwarded value in no file:
not on the nodes, not in the run record, not in Slurm's state, where sbatch keeps a job's script and
environment), its progress lines read by the supervisor, a worker that fails its first attempt restarted,
and the run `finished` by the `chief` success policy while its ps would serve forever; submitted here, and
from a login host over SSH. Plain Python: the built-in models' TensorFlow runs are in test_slurm_lifecycle.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.run import records
from testkit.slurm import SlurmCluster
from testkit.sshd import Machines
from testkit.toml_out import toml_value
from tests.integration.lifecycle_helpers import cli
from tests.integration.slurm_helpers import assert_nothing_left, job_of, run_id_of, settled, slurm_env

pytestmark = pytest.mark.integration
__all__ = ["slurm_env"]  # the module's fixture: the CLI talks to the test cluster

SECRET = "s3cret-value-that-must-stay-in-memory"
# A ps that serves until it is ended (as TF1's examples do) and counts the workers that said they are
# through; workers that wait for it, print what they were given and their steps as LoggingTensorHook does;
# worker 1 fails its first attempt; the chief (worker 0) ends once both workers are through.
PROGRAM = '''\
import hashlib, json, os, socket, socketserver, sys, time
job, task, ps = sys.argv[1], int(sys.argv[2]), sys.argv[3]
assert json.loads(os.environ["TF_CONFIG"])["task"] == {"type": job, "index": task}
host, port = ps.rsplit(":", 1)
if job == "ps":
    done = set()
    class Through(socketserver.StreamRequestHandler):
        def handle(self):
            done.update({self.rfile.readline()} - {b""})  # a bare connect (is it up?) says nothing
            self.wfile.write(b"%d\\n" % len(done))
    socketserver.TCPServer(("", int(port)), Through).serve_forever()
if job == "worker" and task == 1 and not os.path.exists("failed-once"):
    open("failed-once", "w").close()
    sys.exit(3)
def through():
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"worker %d\\n" % task)
        return int(s.makefile().readline())
while socket.socket().connect_ex((host, int(port))) != 0:
    time.sleep(0.1)
secret = hashlib.sha256(os.environ["TFC_SECRET"].encode()).hexdigest()
print(f"{job}:{task} on {os.environ['SLURMD_NODENAME']} note={os.environ['MY_NOTE']} secret={secret}", flush=True)
for step in range(1, 41):
    print(f"loss = {1.0 / step:.4f}, step = {step} (0.050 sec)", flush=True)
    time.sleep(0.05)
while through() < 2 and task == 0:
    time.sleep(0.1)
'''


def login_host(sshd_machines: Callable[..., Machines], cluster: SlurmCluster, home: Path) -> tuple[str, str]:
    """A login host where Slurm's commands run (a real sshd; its shell finds the cluster's slurm.conf as a
    cluster's login node does, here through the .bashrc of its HOME): its address and the [ssh] section."""
    home.mkdir()
    (home / ".bashrc").write_text(f"export SLURM_CONF={cluster.conf}\n")
    m = sshd_machines(1, home=str(home))
    keys = {"user": m.user, "port": m.port, "identity_file": m.identity_file, "known_hosts": m.known_hosts,
            "config_file": "none", "use_agent": False}
    return m.addresses[0], "[ssh]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in keys.items())


@pytest.mark.parametrize("where", ["here", "login"])
def test_a_users_program_runs_as_on_ssh_hosts(slurm_cluster: SlurmCluster, tmp_path: Path, state_dir: Path,
                                              monkeypatch: pytest.MonkeyPatch, where: str,
                                              sshd_machines: Callable[..., Machines]) -> None:
    """`here`: sbatch and the steps' srun on this machine; `login`: on [slurm] login, over [ssh]."""
    (tmp_path / "train.py").write_text(PROGRAM)
    note = "it's $(touch pwned) `id`"
    login, ssh = login_host(sshd_machines, slurm_cluster, tmp_path / "home") if where == "login" else ("", "")
    hosts = slurm_cluster.hosts_toml(
        tmp_path / "hosts.toml", slurm={"nodes": 3, "workers": 2, "ps": 1, **({"login": login} if login else {})},
        training={"command": "{python} train.py {job} {task} {ps_hosts}", "sync": ["train.py"],
                  "env": {"MY_NOTE": note}, "forward_env": ["TFC_SECRET"], "success": "chief",
                  "restart": "on-failure"})
    hosts.write_text(hosts.read_text() + "\n" + ssh)
    monkeypatch.setenv("TFC_SECRET", SECRET)
    res = cli(state_dir, "start", "--wait", str(hosts))
    assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-3000:])
    run_id = run_id_of(state_dir)
    job = job_of(state_dir)
    code, st = settled(state_dir, run_id)
    assert records.load(run_id).slurm == records.SlurmJob(job, submit_host=login, state="COMPLETED", reason="None")
    assert code == 0 and st["state"] == "finished" and st["slurm"]["state"] == "COMPLETED", st
    tasks = {t["name"]: t for t in st["tasks"]}
    assert tasks["worker:1"]["restarts"] == 1 and tasks["worker:0"]["exit_code"] == 0, tasks
    assert tasks["ps:0"]["stopped_by"] == "run", tasks["ps:0"]  # ended by the success policy, not failed
    logs = cli(state_dir, "logs", run_id, "worker").stdout
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    for task, node in (("worker:0", "n2"), ("worker:1", "n3")):
        assert f"{task}@{node} {task} on {node} note={note} secret={digest}" in logs, logs[-2000:]
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()
    for tree in (tmp_path, state_dir, slurm_cluster.root):
        holding = [p for p in tree.rglob("*") if p.is_file() and not p.is_symlink()
                   and SECRET.encode() in p.read_bytes()]
        assert not holding, f"the forwarded value is in {holding}"
    assert_nothing_left(slurm_cluster, run_id, job)
