"""`stop` and `status` over scripted hosts (testkit/scripted_transport.py): verification after a stop,
purge, an unreachable host, and every run state `status` derives (running, lost, unreachable, finished,
failed, stopped). The real-sshd versions of these paths are in tests/integration/test_lifecycle.py."""

from __future__ import annotations

from pathlib import Path

from orchestrator.monitor.status import status
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
    assert status(record, timeout=5, opener=cluster.opener).state == "stopped"


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
    st = status(record, timeout=2, opener=cluster.opener)
    assert st.state == "partial"
    by_task = {t.name: t for t in st.tasks}
    assert by_task["worker:1"].state == "unreachable" and by_task["worker:1"].host == "m2"
    assert not next(h for h in st.hosts if h.host == "m2").reachable
    cluster.host("m2").down = False
    assert all(r.ok for r in stop(record, grace=0.1, timeout=2, opener=cluster.opener).values())
    assert runs.load("run").status == "stopped"


def test_status_running_then_lost_when_a_supervisor_is_killed(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    record = _started(tmp_path, cluster)
    st = status(record, timeout=5, opener=cluster.opener)
    assert st.state == "running" and all(t.state == "running" and t.pid for t in st.tasks)
    assert all(h.supervisor == "running" and h.supervisor_alive and h.processes for h in st.hosts)
    cluster.host("m1").kill_supervisor()
    st = status(record, timeout=5, opener=cluster.opener)
    assert {t.name: t.state for t in st.tasks} == {"ps:0": "running", "worker:0": "lost", "worker:1": "running"}
    assert st.state == "partial"
    m1 = next(h for h in st.hosts if h.host == "m1")
    assert m1.supervisor == "running" and not m1.supervisor_alive


def test_status_finished_and_failed(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    record = _started(tmp_path, cluster)
    for name in ("m0", "m1", "m2"):
        cluster.host(name).finish_tasks()
    st = status(record, timeout=5, opener=cluster.opener)
    assert st.state == "finished" and not st.failed
    assert all(t.state == "exited" and t.exit_code == 0 and t.final for t in st.tasks)

    other = _started(tmp_path, cluster, "failing")
    cluster.host("m2").finish_tasks(_root(cluster, "m2", "failing"), exit_code=3)
    st = status(other, timeout=5, opener=cluster.opener)
    assert st.state == "failed" and st.failed
    assert [t.name for t in st.tasks if t.failed] == ["worker:1"]


def test_status_retries_a_lost_probe_and_reports_a_host_that_keeps_failing(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    record = _started(tmp_path, cluster)
    cluster.host("m0").fail("probe", "lost", after=True)  # once: retried
    cluster.host("m1").fail("probe", "exit", times=10, stderr="python: not found")  # not a transient fault
    st = status(record, timeout=5, opener=cluster.opener)
    assert next(t for t in st.tasks if t.host == "m0").state == "running"
    m1 = next(h for h in st.hosts if h.host == "m1")
    assert not m1.reachable and m1.error is not None and "python: not found" in m1.error
    assert cluster.host("m0").steps.count("probe") == 2 and cluster.host("m1").steps.count("probe") == 0
