"""`tfcluster resize` (issue 37, phase 1) over real sshd machines, a user's own plain-Python program (no
TensorFlow, tests/helpers/tfconfig_program.py): each task writes the TF_CONFIG it was started with to a file
of its own and runs until the test ends the run. One run per test, stages in order:
- grow 1 -> 2 worker hosts: the new worker runs with a TF_CONFIG listing both, nobody else restarts, and
  `status --json` / `dash --once --json` show the new task at once;
- a worker added on a host that already runs one: its supervisor takes it on, its old task runs on;
- shrink back: the removed workers' processes are gone, their rows go (not `lost`), the left host's run dir too;
- a refused resize (a ps moved or added, a new task's port taken on its host) changes nothing: the
  record's bytes, the processes;
- a half-way failure leaves the run as it was and says what it undid: a new host's sshd down (another new
  host prepared meanwhile), or a new worker failing on a running host after a new host joined.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.plan.from_file import plan_file
from orchestrator.plan.model import ClusterPlan
from orchestrator.plan.resize_diff import plan_resize
from testkit.sshd import Machines
from tests.helpers.tfconfig_program import fail_file, program_training, tf_configs
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import cli, dash_json, run_processes, started_run_id, status_json

pytestmark = pytest.mark.integration

@pytest.fixture(scope="module")
def four(sshd_machines: Any) -> Iterator[Machines]:
    """Four loopback machines: m0 ps, m1 a worker, m2 and m3 to join (m3's sshd is stopped in one test)."""
    m = sshd_machines(4)
    yield m
    m.close()


class Cluster:
    """One test's run: its hosts files (same base port, same program) and what its tasks wrote."""

    def __init__(self, machines: Machines, tmp_path: Path, state_dir: Path) -> None:
        from orchestrator.run.local_ports import free_port_block

        self.machines, self.tmp, self.state = machines, tmp_path, state_dir
        self.base_port = free_port_block(4 * 4)
        self.training = program_training(tmp_path)
        self.run_id = ""

    def hosts(self, name: str, roles: list[list[str]], extra: dict[int, dict[str, object]] | None = None) -> Path:
        return self.machines.hosts_toml(
            self.tmp / name, roles=roles, base_port=self.base_port, host_extra=extra,
            training=self.training)

    def start(self, hosts: Path) -> None:
        res = cli(self.state, "start", str(hosts))
        assert res.returncode == 0, res.stderr
        self.run_id = started_run_id(res.stdout)

    def resize(self, hosts: Path, *flags: str) -> Any:
        return cli(self.state, "resize", self.run_id, str(hosts), *flags)

    def record_bytes(self) -> bytes:
        return (self.state / "runs" / f"{self.run_id}.json").read_bytes()

    def record(self) -> dict[str, Any]:
        return dict(json.loads(self.record_bytes()))

    def tf_configs(self, job: str, task: int) -> list[tuple[int, dict[str, Any]]]:
        return tf_configs(self.tmp, job, task)

    def pids(self) -> dict[str, int]:
        """task id (`worker-1`) -> pid of each live process of the run running the program (psutil)."""
        found = {}
        for p in run_processes(self.run_id):
            try:
                task = p.environ().get("TFCLUSTER_TASK_ID", "")
                if task and "prog.py" in " ".join(p.cmdline()):
                    found[task.partition("#")[0]] = p.pid
            except psutil.Error:
                continue
        return found

    def rows(self) -> dict[str, dict[str, Any]]:
        _, st = status_json(self.state, self.run_id)
        return {t["name"]: t for t in st["tasks"]}


@pytest.fixture
def cluster(four: Machines, tmp_path: Path, state_dir: Path) -> Iterator[Cluster]:
    c = Cluster(four, tmp_path, state_dir)
    yield c
    if c.run_id:
        cli(state_dir, "stop", c.run_id, "--grace", "1")


# The program sleeps: a task that reports no progress is `stalled` while its CPU time stands still.
ALIVE = ("running", "stalled")


def _running(c: Cluster, names: set[str]) -> dict[str, dict[str, Any]] | None:
    """The rows of `status --json` when they are exactly these tasks, each alive (none lost or exited)."""
    rows = c.rows()
    return rows if set(rows) == names and all(r["state"] in ALIVE for r in rows.values()) else None


def test_grow_add_on_a_running_host_and_shrink_back(cluster: Cluster) -> None:
    c = cluster
    c.start(c.hosts("one.toml", [["ps"], ["worker"]]))
    wait_for(lambda: c.tf_configs("worker", 0), 30, "worker:0 to write its TF_CONFIG")
    before = c.pids()
    assert set(before) == {"ps-0", "worker-0"}

    # grow: a second worker host
    res = c.resize(c.hosts("two.toml", [["ps"], ["worker"], ["worker"]]))
    assert res.returncode == 0, res.stderr
    assert "host m2 joins" in res.stdout and "worker:1 starts on m2" in res.stdout
    seen = wait_for(lambda: c.tf_configs("worker", 1), 30, "worker:1 to write its TF_CONFIG")
    spec = seen[-1][1]["cluster"]
    assert len(spec["worker"]) == 2 and seen[-1][1]["task"] == {"type": "worker", "index": 1}
    assert spec["worker"][0] == c.tf_configs("worker", 0)[0][1]["cluster"]["worker"][0]  # worker:0's port kept
    rows = _running(c, {"ps:0", "worker:0", "worker:1"})
    assert rows is not None and rows["worker:1"]["host"] == "m2", c.rows()
    dash = dash_json(c.state, c.run_id)
    assert {t["name"] for t in dash["tasks"]} == {"ps:0", "worker:0", "worker:1"}
    assert any("resize: host m2 joins; worker:1 starts on m2" in e["text"] for e in dash["log"]), dash["log"]
    now = c.pids()
    assert {k: now[k] for k in before} == before  # nobody else restarted
    record = c.record()
    assert [h["name"] for h in record["hosts"]] == ["m0", "m1", "m2"]
    assert record["resizes"][-1]["added"] == ["worker:1"] and record["resizes"][-1]["hosts_added"] == ["m2"]

    # shrink back
    res = c.resize(c.hosts("one.toml", [["ps"], ["worker"]]))
    assert res.returncode == 0, res.stderr
    assert "worker:1 on m2 is stopped" in res.stdout and "host m2 leaves" in res.stdout
    assert "worker-1" not in c.pids() and now["worker-1"] not in {p.pid for p in psutil.process_iter()}
    wait_for(lambda: _running(c, {"ps:0", "worker:0"}), 30, "the two tasks left, and no `lost` row")
    assert not Path(c.machines.workdir(2), "runs", c.run_id, "m2").exists()  # the host's run dir removed
    assert c.pids() == before

    # a worker added on a host that already runs one: its supervisor takes it on
    res = c.resize(c.hosts("more.toml", [["ps"], ["worker"]], {1: {"workers": 2}}))
    assert res.returncode == 0, res.stderr
    seen = wait_for(lambda: c.tf_configs("worker", 1)[1:], 30, "a second worker:1, on m1")
    assert len(seen[-1][1]["cluster"]["worker"]) == 2
    rows = wait_for(lambda: _running(c, {"ps:0", "worker:0", "worker:1"}), 30, "three tasks running")
    assert rows is not None and rows["worker:1"]["host"] == "m1"
    on_m1 = c.pids()
    assert {k: on_m1[k] for k in before} == before

    # and dropped again by the same supervisor
    res = c.resize(c.hosts("one.toml", [["ps"], ["worker"]]))
    assert res.returncode == 0, res.stderr
    assert c.pids() == before and not psutil.pid_exists(on_m1["worker-1"])
    assert _running(c, {"ps:0", "worker:0"}) is not None
    assert [len(r["added"]) + len(r["removed"]) for r in c.record()["resizes"]] == [1, 1, 1, 1]


def test_restart_all_restarts_the_others_with_the_new_cluster(cluster: Cluster) -> None:
    c = cluster
    c.start(c.hosts("one.toml", [["ps"], ["worker"]]))
    wait_for(lambda: c.tf_configs("worker", 0), 30, "worker:0 to write its TF_CONFIG")
    before = c.pids()
    res = c.resize(c.hosts("two.toml", [["ps"], ["worker"], ["worker"]]), "--restart-all")
    assert res.returncode == 2 and "--yes" in res.stderr  # not asked on a pipe: refused, nothing changed
    assert c.pids() == before
    res = c.resize(c.hosts("two.toml", [["ps"], ["worker"], ["worker"]]), "--restart-all", "--yes")
    assert res.returncode == 0, res.stderr
    configs = wait_for(lambda: c.tf_configs("worker", 0)[1:], 30, "worker:0 restarted")
    assert len(configs[-1][1]["cluster"]["worker"]) == 2
    after = c.pids()
    assert after["ps-0"] != before["ps-0"] and after["worker-0"] != before["worker-0"]
    logs = cli(c.state, "logs", c.run_id, "worker:1")  # `logs` and `stop` see the new shape
    assert logs.returncode == 0 and "worker:1@m2" in logs.stdout, logs.stdout + logs.stderr
    stop = cli(c.state, "stop", c.run_id, "--grace", "1")
    assert stop.returncode == 0 and "m2" in stop.stdout, stop.stdout + stop.stderr
    assert not run_processes(c.run_id)


def test_a_refused_resize_changes_nothing(cluster: Cluster) -> None:
    c = cluster
    c.start(c.hosts("one.toml", [["ps"], ["worker"]]))
    wait_for(lambda: c.tf_configs("worker", 0), 30, "worker:0 to write its TF_CONFIG")
    before, record = c.pids(), c.record_bytes()
    for name, roles in (("ps-moved.toml", [["worker"], ["ps"]]), ("two-ps.toml", [["ps"], ["worker"], ["ps"]])):
        res = c.resize(c.hosts(name, roles), "--yes")
        assert res.returncode == 2, res.stdout + res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
        assert "ps" in res.stderr and "only workers may change" in res.stderr
    # the port a new worker on m1 would get is taken there: refused before anything changes
    more = c.hosts("more.toml", [["ps"], ["worker"]], {1: {"workers": 2}})
    port = plan_resize(ClusterPlan.from_json(c.record()["plan"]), plan_file(more)).new.task("worker", 1).port
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("0.0.0.0", port))
        holder.listen()
        res = c.resize(more)
    assert res.returncode == 2 and f"port {port} (worker:1) is in use" in res.stderr, res.stdout + res.stderr
    assert "nothing changed" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    res = c.resize(c.hosts("dry.toml", [["ps"], ["worker"], ["worker"]]), "--dry-run")
    assert res.returncode == 0 and "worker:1 starts on m2" in res.stdout and "nothing changed" in res.stdout
    assert c.record_bytes() == record
    assert c.pids() == before
    assert not Path(c.machines.workdir(2), "runs", c.run_id).exists() or not Path(
        c.machines.workdir(2), "runs", c.run_id, "m2").exists()


def test_a_new_host_unreachable_leaves_the_run_as_it_was(cluster: Cluster) -> None:
    c = cluster
    c.start(c.hosts("one.toml", [["ps"], ["worker"]]))
    wait_for(lambda: c.tf_configs("worker", 0), 30, "worker:0 to write its TF_CONFIG")
    before, record = c.pids(), c.record_bytes()
    c.machines.stop(3)
    try:
        res = c.resize(c.hosts("four.toml", [["ps"], ["worker"], ["worker"], ["worker"]]))
    finally:
        c.machines.start(3)
    assert res.returncode != 0, res.stdout
    assert "m3" in res.stderr and "undone" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert c.record_bytes() == record
    assert c.pids() == before
    assert not Path(c.machines.workdir(2), "runs", c.run_id, "m2").exists()  # m2 was prepared, then released
    assert set(c.rows()) == {"ps:0", "worker:0"}
    assert not c.tf_configs("worker", 1)


def test_a_new_worker_failing_on_a_running_host_undoes_the_whole_resize(cluster: Cluster) -> None:
    c = cluster
    c.start(c.hosts("one.toml", [["ps"], ["worker"]]))
    wait_for(lambda: c.tf_configs("worker", 0), 30, "worker:0 to write its TF_CONFIG")
    before, record = c.pids(), c.record_bytes()
    fail_file(c.tmp, "worker", 1).touch()  # worker:1, the new one on m1, fails at once (worker:2 joins on m2)
    res = c.resize(c.hosts("grown.toml", [["ps"], ["worker"], ["worker"]], {1: {"workers": 2}}))
    assert res.returncode == 1, res.stdout + res.stderr
    line = res.stderr.strip()
    assert "worker:1 exited with exit code 3" in line and "resize undone" in line, line
    assert "gave m0, m1 the run's plan back" in line and "stopped and removed what was started on m2" in line
    assert len(line.splitlines()) == 1
    assert c.record_bytes() == record
    assert c.pids() == before  # worker:2 gone with its host m2, worker:1 dropped on m1, the others untouched
    assert c.tf_configs("worker", 2)  # m2's worker had started: this was a real half-way failure
    assert not Path(c.machines.workdir(2), "runs", c.run_id, "m2").exists()
    assert _running(c, {"ps:0", "worker:0"}) is not None
