"""`stop` and `status` over scripted hosts (testkit/scripted_transport.py): verification after a stop,
purge, an unreachable host, and every run state a read of the hosts derives (running, lost, unreachable,
finished, failed, stopped). The real-sshd versions of these paths are in tests/integration/test_lifecycle.py."""

from __future__ import annotations

from pathlib import Path

from orchestrator.monitor.status import read_run
from orchestrator.plan.model import ClusterPlan
from orchestrator.run import launch
from orchestrator.run import records as runs
from orchestrator.run.stop import stop
from testkit.scripted_transport import ScriptedCluster
from tests.plans import tiny_plan


def _plan() -> ClusterPlan:
    return tiny_plan([("ps",), ("worker",), ("worker",)], transport="ssh", training={"command": "sleep 60"})


def _started(tmp_path: Path, cluster: ScriptedCluster, name: str = "run") -> runs.RunRecord:
    opts = launch.StartOptions(timeout=20, op_timeout=5, run_name=name)
    return launch.start(_plan(), str(tmp_path / "hosts.toml"), opts, opener=cluster.opener).record


def _root(cluster: ScriptedCluster, host: str, run_id: str) -> str:
    return next(root for root in cluster.host(host).runs if root.endswith(f"/runs/{run_id}/{host}"))


def test_stop_verifies_and_is_idempotent(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    record = _started(tmp_path, cluster)
    result = stop(record, grace=0.1, timeout=5, opener=cluster.opener)
    assert all(r.ok and not r.remaining and r.killed for r in result.values())
    assert all(h.steps[-1] == "stop" and h.commands == 2 for h in cluster.hosts.values())  # start, stop
    assert runs.load("run").status == "stopped"
    again = stop(record, grace=0.1, timeout=5, opener=cluster.opener)
    assert all(r.ok and not r.killed for r in again.values())
    assert read_run(record, timeout=5, opener=cluster.opener).run_state == "stopped"


def test_stop_purge_removes_run_dirs_and_the_record(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    record = _started(tmp_path, cluster)
    result = stop(record, grace=0.1, timeout=5, purge=True, opener=cluster.opener)
    assert all(r.ok and r.purged for r in result.values())
    assert all(not h.runs for h in cluster.hosts.values())
    assert not runs.exists("run")


def test_stop_that_leaves_a_process_is_not_ok_and_purges_nothing(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    record = _started(tmp_path, cluster)
    cluster.host("m1").stubborn = True
    result = stop(record, grace=0.1, timeout=5, purge=True, opener=cluster.opener)
    assert not result["m1"].ok and result["m1"].remaining and not result["m1"].purged
    assert result["m0"].ok and result["m0"].purged
    assert cluster.host("m1").runs and runs.exists("run")  # the record still says where the run lives


def test_stop_reports_an_unreachable_host_and_status_says_partial(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    record = _started(tmp_path, cluster)
    cluster.host("m2").down = True
    result = stop(record, grace=0.1, timeout=2, opener=cluster.opener)
    assert result["m0"].ok and result["m1"].ok
    assert not result["m2"].ok and result["m2"].error is not None and "refused" in result["m2"].error
    assert runs.load("run").status == "started"  # not every host verified: the record keeps the run
    st = read_run(record, timeout=2, opener=cluster.opener)
    assert st.run_state == "partial"
    assert st.tasks["worker:1"].state == "unreachable" and st.tasks["worker:1"].host == "m2"
    assert not st.hosts["m2"].reachable
    cluster.host("m2").down = False
    assert all(r.ok for r in stop(record, grace=0.1, timeout=2, opener=cluster.opener).values())
    assert runs.load("run").status == "stopped"


def test_status_running_then_lost_when_a_supervisor_is_killed(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    record = _started(tmp_path, cluster)
    st = read_run(record, timeout=5, opener=cluster.opener)
    assert st.run_state == "running" and all(t.state == "running" and t.pid for t in st.tasks.values())
    assert all(h.supervisor_state == "running" and h.supervisor_alive for h in st.hosts.values())
    cluster.host("m1").kill_supervisor()
    st = read_run(record, timeout=5, opener=cluster.opener)
    assert {t.name: t.state for t in st.tasks.values()} == {"ps:0": "running", "worker:0": "lost", "worker:1": "running"}
    assert st.run_state == "partial"
    m1 = st.hosts["m1"]
    assert m1.supervisor_state == "running" and m1.supervisor_alive is False and m1.processes == 0


def test_status_finished_and_failed(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    record = _started(tmp_path, cluster)
    for name in ("m0", "m1", "m2"):
        cluster.host(name).finish_tasks()
    st = read_run(record, timeout=5, opener=cluster.opener)
    assert st.run_state == "finished"
    assert all(t.state == "exited" and t.exit_code == 0 and t.final and not t.failed for t in st.tasks.values())

    other = _started(tmp_path, cluster, "failing")
    cluster.host("m2").finish_tasks(_root(cluster, "m2", "failing"), exit_code=3)
    st = read_run(other, timeout=5, opener=cluster.opener)
    assert st.run_state == "failed"
    assert [t.name for t in st.tasks.values() if t.failed] == ["worker:1"]


def test_status_retries_a_lost_read_and_reports_a_host_that_keeps_failing(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    record = _started(tmp_path, cluster)
    cluster.host("m0").fail("read", "lost", after=True)  # once: retried
    cluster.host("m1").fail("read", "exit", times=10, stderr="sh: permission denied")  # not a transient fault
    st = read_run(record, timeout=5, opener=cluster.opener)
    assert st.tasks["ps:0"].state == "running"
    m1 = st.hosts["m1"]
    assert not m1.reachable and m1.error is not None and "permission denied" in m1.error
    assert cluster.host("m0").steps.count("read") == 2 and cluster.host("m1").steps.count("read") == 0
