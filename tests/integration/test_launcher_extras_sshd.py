"""Over the real sshd (loopback machines, the real CLI): a second start on taken ports is refused in one line
and the first run goes on (and `--auto-ports` runs beside it); `[training] forward_env` values reach the
tasks, restarts included, and no file anywhere; a host whose sshd has no SFTP subsystem starts and runs;
`stop --purge` works after the host's python is gone.

The programs are small Python scripts, not TensorFlow: what is tested is the launcher, the ports and the
processes. The port holder binds its TF port on every interface, as a TF server's gRPC does.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest

from testkit import sshd
from testkit.sshd import Machines
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import (
    cli,
    records,
    run_processes,
    started_run_id,
    status_json,
)

pytestmark = pytest.mark.integration

# Binds its port from TF_CONFIG on every interface and listens (as a TF server does); the ps serves until the
# run ends it, a worker until the release file exists.
SERVE = '''\
import json, os, socket, time
cfg = json.loads(os.environ["TF_CONFIG"])
task = cfg["task"]
port = int(cfg["cluster"][task["type"]][task["index"]].rsplit(":", 1)[1])
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", port))
server.listen()
print("serving on", port, flush=True)
while task["type"] == "ps" or not os.path.exists(os.environ["RELEASE_FILE"]):
    time.sleep(0.2)  # polls for the file that ends it
print("done", flush=True)
'''

# Says whether it has the forwarded secret (its hash, never the value); its first attempt fails, so the
# supervisor restarts it, and the restart must have it too.
# Each task fails its first attempt; on the second the PS serves on its port until the run ends it, and
# the worker ends the run (all-workers) only once it reaches the restarted PS: both second attempts run,
# whichever restart comes first.
FORWARDED = '''\
import hashlib, json, os, socket, sys, time
value = os.environ.get("TFC_TEST_SECRET")
attempt = os.environ["TFCLUSTER_TASK_ID"].rsplit("#", 1)[1]
print("attempt", attempt, "secret", hashlib.sha256(value.encode()).hexdigest() if value else "MISSING", flush=True)
if attempt == "0":
    sys.exit(3)
cfg = json.loads(os.environ["TF_CONFIG"])
host, port = cfg["cluster"]["ps"][0].rsplit(":", 1)
if cfg["task"]["type"] == "ps":
    server = socket.create_server((host, int(port)))
    while True:
        server.accept()[0].close()
deadline = time.time() + 60
while True:
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
        sys.exit(0)
    except OSError:
        if time.time() > deadline:
            sys.exit(4)
        time.sleep(0.2)  # retries the connection until the restarted ps serves
'''






def _record(state_dir: Path, run_id: str) -> dict[str, Any]:
    return next(r for r in records(state_dir) if r["run_id"] == run_id)


def _ports(record: dict[str, Any]) -> set[int]:
    plan = record["plan"]
    return {int(t["port"]) for t in plan["tasks"]} | {int(h["control_port"]) for h in plan["hosts"]}


def _ended(state_dir: Path, run_id: str) -> dict[str, Any] | None:
    _, st = status_json(state_dir, run_id)
    return st if st["state"] in ("finished", "failed", "stopped") and all(t["final"] for t in st["tasks"]) else None


def test_a_second_start_on_taken_ports_is_refused_and_auto_ports_runs_beside_the_first(
        machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    (tmp_path / "serve.py").write_text(SERVE)
    release = tmp_path / "release"
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps"], ["worker"], ["worker"]], training={
        "command": "{python} serve.py", "sync": ["serve.py"], "success": "all-workers",
        "env": {"RELEASE_FILE": str(release)}})
    first = cli(state_dir, "start", str(hosts))
    assert first.returncode == 0, first.stderr
    run_a = started_run_id(first.stdout)
    ps_port = next(t["port"] for t in _record(state_dir, run_a)["plan"]["tasks"] if t["job"] == "ps")

    _, st_before = status_json(state_dir, run_a)
    second = cli(state_dir, "start", str(hosts))
    assert second.returncode == 2, second.stderr
    errors = [line for line in second.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0] == second.stderr.strip().splitlines()[-1], second.stderr
    assert errors[0].startswith(f"error: host m0: port {ps_port} (ps:0) is in use by another process"), errors
    [refused] = [r for r in records(state_dir) if r["run_id"] != run_a]
    assert refused["status"] == "failed-to-start" and not any(h["started"] for h in refused["hosts"])
    assert run_processes(refused["run_id"]) == []  # nothing of it ran anywhere, nor is its run dir left
    assert all(h["run_dir"] and not Path(h["run_dir"]).exists() for h in refused["hosts"]), refused["hosts"]
    code, st = status_json(state_dir, run_a)  # the first run is untouched: the same processes, alive
    assert code == 0 and st["state"] == "running", st
    assert [(t["restarts"], t["pid"]) for t in st["tasks"]] == [(0, t["pid"]) for t in st_before["tasks"]]
    assert all(not t["final"] and t["state"] in ("running", "stalled") for t in st["tasks"]), st["tasks"]

    check = cli(state_dir, "check", str(hosts), "--json")  # check's probe tries the same ports, the same way
    assert check.returncode != 0
    control = {h["name"]: h["control_port"] for h in _record(state_dir, run_a)["plan"]["hosts"]}
    rows = {row["host"]: row for row in json.loads(check.stdout)["hosts"]}
    assert all(rows[name]["ports"][str(port)] is not None for name, port in control.items()), rows
    assert any(f"port {control['m0']} (this host's supervisor) is not free" in p for p in rows["m0"]["problems"])

    third = cli(state_dir, "start", "--auto-ports", str(hosts))
    assert third.returncode == 0, third.stderr
    run_c = started_run_id(third.stdout)
    assert not _ports(_record(state_dir, run_a)) & _ports(_record(state_dir, run_c))
    _, st_c = status_json(state_dir, run_c)
    assert all(not t["final"] and t["state"] in ("running", "stalled") for t in st_c["tasks"]), st_c["tasks"]

    release.touch()  # both runs' workers finish; the success policy then ends each run's ps
    for run_id in (run_a, run_c):
        st = wait_for(lambda: _ended(state_dir, run_id), 120, f"{run_id} to end by itself", interval=1.0)  # noqa: B023
        assert st["state"] == "finished", st
        wait_for(lambda: not run_processes(run_id), 30, f"no process of {run_id} left")  # noqa: B023


def test_forward_env_reaches_every_attempt_and_no_file(machines: Machines, tmp_path: Path, state_dir: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"tfc-fwd-marker-{uuid.uuid4().hex}"
    monkeypatch.setenv("TFC_TEST_SECRET", secret)
    (tmp_path / "forwarded.py").write_text(FORWARDED)
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps"], ["worker"]], training={
        "command": "{python} forwarded.py", "sync": ["forwarded.py"], "success": "all-workers",
        "forward_env": ["TFC_TEST_SECRET"]})
    res = cli(state_dir, "start", str(hosts))
    assert res.returncode == 0, res.stderr
    run_id = started_run_id(res.stdout)
    st = wait_for(lambda: _ended(state_dir, run_id), 120, "the run to end", interval=1.0)
    assert st["state"] == "finished", st
    logs = cli(state_dir, "logs", run_id).stdout
    digest = hashlib.sha256(secret.encode()).hexdigest()
    for task in ("ps:0", "worker:0"):
        said = [line.split()[-1] for line in logs.splitlines() if line.startswith(task) and " attempt " in line]
        assert said == [digest, digest], logs  # the first attempt and its restart
    shown = [cli(state_dir, "plan", str(hosts)).stdout, cli(state_dir, "plan", str(hosts), "--json").stdout,
             json.dumps(status_json(state_dir, run_id)[1]), logs]
    assert all(secret not in text for text in shown)
    scanned = [p for root in (*[Path(machines.workdir(i)) for i in range(2)], state_dir)
               for p in root.rglob("*") if p.is_file()]
    assert any(p.name == "run.json" for p in scanned) and len(scanned) > 20
    assert [p for p in scanned if secret.encode() in p.read_bytes()] == []


@pytest.fixture(scope="module")
def no_sftp_machine() -> Iterator[Machines]:
    missing = sshd.sshd_available()
    if missing:
        pytest.fail(missing)
    m = sshd.start_machines(1, sftp=False)
    yield m
    m.close()


def test_a_host_without_an_sftp_subsystem_starts_and_runs(no_sftp_machine: Machines, tmp_path: Path,
                                                          state_dir: Path) -> None:
    m = no_sftp_machine
    client = paramiko.SSHClient()
    client.load_host_keys(m.known_hosts)
    client.connect(m.addresses[0], port=m.port, username=m.user, key_filename=m.identity_file,
                   allow_agent=False, look_for_keys=False)
    with pytest.raises(paramiko.SSHException):
        client.open_sftp()  # the machine really has no SFTP
    client.close()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "input.txt").write_text("payload-from-sync\n")
    (tmp_path / "job.py").write_text("print('read:', open('data/input.txt').read().strip(), flush=True)\n")
    hosts = m.hosts_toml(tmp_path / "hosts.toml", roles=[["worker"]], mode="multi-worker-mirrored",
                         training={"command": "{python} job.py", "sync": ["job.py", "data/input.txt"]})
    res = cli(state_dir, "start", str(hosts))
    assert res.returncode == 0, res.stderr
    run_id = started_run_id(res.stdout)
    st = wait_for(lambda: _ended(state_dir, run_id), 60, "the run to end", interval=1.0)
    assert st["state"] == "finished", st
    assert "read: payload-from-sync" in cli(state_dir, "logs", run_id).stdout


def test_stop_and_purge_after_the_hosts_python_is_gone(machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    link = tmp_path / "py" / "python3"
    link.parent.mkdir()
    link.symlink_to(sys.executable)
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps"], ["worker"]],
                                host_extra={0: {"python": str(link)}, 1: {"python": str(link)}},
                                training={"command": "sleep 600"})
    res = cli(state_dir, "start", str(hosts))
    assert res.returncode == 0, res.stderr
    run_id = started_run_id(res.stdout)
    run_dirs = [Path(h["run_dir"]) for h in _record(state_dir, run_id)["hosts"]]
    assert all(d.is_dir() for d in run_dirs) and len(run_processes(run_id)) >= 4  # 2 supervisors, 2 tasks
    link.unlink()  # python removed after the start
    stop = cli(state_dir, "stop", run_id, "--purge", "--grace", "2")
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert "unreachable" not in stop.stdout + stop.stderr
    assert stop.stdout.count("stopped, purged") == 2, stop.stdout
    assert run_processes(run_id) == []
    assert not any(d.exists() for d in run_dirs)
    assert not os.path.exists(state_dir / "runs" / f"{run_id}.json")  # purged everywhere: the record too
