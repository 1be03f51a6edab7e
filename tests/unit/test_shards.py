"""Hosts sharded over worker processes (orchestrator/transport/shards.py, run/start_shards.py): the
same two-phase start, one progress display, results back in the parent. Real forked processes and
pipes; the hosts are scripted (testkit/scripted_transport.py), and since each worker changes its own
copy of them, what ran where is read from the scripted cluster's journal file, which every process
appends to."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from orchestrator.errors import HostError
from orchestrator.monitor.status import read_run
from orchestrator.plan.model import ClusterPlan
from orchestrator.run import launch
from orchestrator.run import records as runs
from orchestrator.transport import shards
from orchestrator.transport.fan_out import fan_out
from testkit.scripted_transport import ScriptedCluster
from tests.helpers.ctrl_c import ctrl_c
from tests.plans import tiny_plan

HOSTS = 6


@pytest.fixture(autouse=True)
def two_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At most 2 hosts per process and 2 usable cores: 6 hosts make 2 workers, whatever this machine."""
    monkeypatch.setenv("TFCLUSTER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv(shards.HOSTS_PER_PROCESS_ENV, "2")
    monkeypatch.setattr(shards, "usable_cores", lambda: 2)


def _plan() -> ClusterPlan:
    return tiny_plan([("ps",), *[("worker",)] * (HOSTS - 1)], transport="ssh", training={"command": "sleep 60"})


def _journal(path: Path) -> list[tuple[str, str]]:
    return [tuple(line.split()) for line in path.read_text().splitlines()] if path.exists() else []  # type: ignore[misc]


def test_shard_count_and_split() -> None:
    assert shards.shard_count(2) == 1 and shards.shard_count(3) == 2 and shards.shard_count(1000) == 2
    assert shards.split(["a", "b", "c", "d", "e"], 2) == [["a", "c", "e"], ["b", "d"]]


def test_sharded_fan_out_returns_every_result_and_error_to_the_parent() -> None:
    seen: list[str] = []

    def work(key: str) -> int:
        if key == "h3":
            raise HostError(key, "refused", "down")
        return int(key[1:]) * 10

    keys = [f"h{i}" for i in range(HOSTS)]
    results = fan_out(keys, work, shardable=True, on_done=lambda key, result: seen.append(key))
    assert list(results) == keys and sorted(seen) == sorted(keys)
    assert results["h5"] == 50
    error = results["h3"]
    assert isinstance(error, HostError) and (error.host, error.reason, error.detail) == ("h3", "refused", "down")


def test_sharded_start_keeps_the_barrier_across_processes(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    cluster = ScriptedCluster(journal=str(journal))
    events: list[tuple[str, str]] = []
    opts = launch.StartOptions(timeout=30, op_timeout=10, run_name="sharded")
    result = launch.start(_plan(), str(tmp_path / "hosts.toml"), opts, opener=cluster.opener,
                          progress=lambda host, phase, done, total: events.append((host, phase)))
    assert all(o.ok and o.supervisor_pid for o in result.outcomes.values())
    steps = _journal(journal)
    first_launch = next(i for i, (_, step) in enumerate(steps) if step == "launch")
    assert {h for h, step in steps[:first_launch] if step == "prepare"} == {f"m{i}" for i in range(HOSTS)}
    assert Counter(step for _, step in steps) == {"prepare": HOSTS, "ship": HOSTS, "launch": HOSTS}
    # One display: every host's progress reached this process, up to "running".
    assert {h for h, phase in events if phase == "running"} == {f"m{i}" for i in range(HOSTS)}
    record = runs.load("sharded")
    assert record.status == "started"
    assert all(h.started and h.supervisor_pid and h.run_dir.endswith(f"/runs/sharded/{h.name}") for h in record.hosts)


def test_a_failure_in_one_worker_launches_nothing_in_any(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    cluster = ScriptedCluster(journal=str(journal))
    cluster.host("m3").fail("prepare", "exit", stderr="disk full")
    opts = launch.StartOptions(timeout=30, op_timeout=10, run_name="no-go")
    with pytest.raises(HostError, match=r"host m3: prepare: .*disk full.*nothing was started"):
        launch.start(_plan(), str(tmp_path / "hosts.toml"), opts, opener=cluster.opener)
    assert not [step for _, step in _journal(journal) if step == "launch"]
    assert runs.load("no-go").status == "failed-to-start"


def test_ctrl_c_in_a_sharded_start_cancels_the_workers_and_rolls_back(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    cluster = ScriptedCluster(journal=str(journal), cost={"launch": 0.3})

    opts = launch.StartOptions(timeout=30, op_timeout=10, run_name="ctrl-c")
    with ctrl_c() as press:
        def progress(host: str, phase: str, done: int, total: int) -> None:
            if host == "m0" and phase == "running":
                press()  # Ctrl-C reaches the parent (workers ignore SIGINT) mid-launch

        with pytest.raises(launch.StartInterrupted, match="interrupted: start cancelled"):
            launch.start(_plan(), str(tmp_path / "hosts.toml"), opts, opener=cluster.opener, progress=progress)
    stops = {h for h, step in _journal(journal) if step == "stop"}
    assert stops == {f"m{i}" for i in range(HOSTS)}  # the rollback visited every host marked started
    assert runs.load("ctrl-c").status in ("interrupted", "stopped")


def test_sharded_status_reads_every_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = ScriptedCluster()
    monkeypatch.setenv(shards.HOSTS_PER_PROCESS_ENV, "100")  # start in this process: the hosts keep the run
    opts = launch.StartOptions(timeout=30, op_timeout=10, run_name="watched")
    record = launch.start(_plan(), str(tmp_path / "hosts.toml"), opts, opener=cluster.opener).record
    monkeypatch.setenv(shards.HOSTS_PER_PROCESS_ENV, "2")
    st = read_run(record, timeout=5, opener=cluster.opener)
    assert st.run_state == "running" and len(st.tasks) == HOSTS and all(t.state == "running" for t in st.tasks.values())
