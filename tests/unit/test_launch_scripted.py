"""`start` over scripted hosts (testkit/scripted_transport.py): the two phases, retries on lost
connections, rollback when a host fails, --allow-partial and Ctrl-C, with faults injected at exact
steps. The scripted hosts stand in for what one machine cannot provide at unit-test speed (many hosts,
a fault at a chosen step); tests/integration/test_lifecycle.py runs the same paths over real sshd."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import HostError
from orchestrator.plan.model import ClusterPlan
from orchestrator.run import launch
from orchestrator.run import records as runs
from testkit.scripted_transport import ScriptedCluster
from tests.helpers.ctrl_c import ctrl_c
from tests.plans import tiny_plan


def _plan(hosts: int = 3) -> ClusterPlan:
    return tiny_plan([("ps",), *[("worker",)] * (hosts - 1)], transport="ssh", training={"command": "sleep 60"})


def _start(cluster: ScriptedCluster, plan: ClusterPlan, tmp_path: Path, **options: object) -> launch.StartResult:
    opts = launch.StartOptions(timeout=20, op_timeout=5, **options)  # type: ignore[arg-type]
    return launch.start(plan, str(tmp_path / "hosts.toml"), opts, opener=cluster.opener)


def _running(cluster: ScriptedCluster) -> dict[str, int]:
    """Live supervisors per host."""
    return {name: sum(r.supervisor_alive for r in h.runs.values()) for name, h in cluster.hosts.items()}


def test_start_prepares_every_host_before_launching_any(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    order: list[tuple[str, str]] = []
    opts = launch.StartOptions(timeout=20, op_timeout=5)
    result = launch.start(_plan(), str(tmp_path / "hosts.toml"), opts, opener=cluster.opener,
                          progress=lambda host, phase, done, total: order.append((host, phase)))
    assert all(o.ok and o.supervisor_pid for o in result.outcomes.values())
    first_launch = next(i for i, (_, phase) in enumerate(order) if phase == "launch")
    prepared_after = [h for h, phase in order[first_launch:] if phase in ("prepare", "ship")]
    assert prepared_after == [], order  # the barrier: no host launches before every host is prepared
    assert _running(cluster) == {"m0": 1, "m1": 1, "m2": 1}
    # One remote command per host for the whole start: prepare, ship, barrier, launch, readiness.
    assert {name: (h.commands, h.steps) for name, h in cluster.hosts.items()} == {
        name: (1, ["prepare", "ship", "launch"]) for name in ("m0", "m1", "m2")}
    record = runs.load(result.record.run_id)
    assert record.status == "started" and all(h.started and h.supervisor_pid for h in record.hosts)
    assert all(h.run_dir.endswith(f"/runs/{record.run_id}/{h.name}") for h in record.hosts)
    # Cold hosts got every file once; a second start on the same hosts uploads nothing.
    assert all(10 < o.uploaded <= o.shipped for o in result.outcomes.values())  # identical files go once
    again = _start(cluster, _plan(), tmp_path)
    assert all(o.ok and o.uploaded == 0 for o in again.outcomes.values())
    assert all(h.commands == 2 and h.steps[3:] == ["prepare", "launch"] for h in cluster.hosts.values())


def test_lost_connections_are_retried_without_a_second_supervisor(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    m1 = cluster.host("m1")
    m1.fail("prepare", "lost", after=True)  # the run dir was made; the answer never came back
    m1.fail("launch", "lost", after=True)  # the supervisor started; the answer never came back
    m1.fail("connect", "timeout")  # and the first reconnection times out
    result = _start(cluster, _plan(), tmp_path)
    assert all(o.ok for o in result.outcomes.values())
    assert m1.supervisors_started == 1 and m1.steps.count("launch") == 2
    assert result.outcomes["m1"].supervisor_pid == next(iter(m1.runs.values())).supervisor_pid
    assert m1.connects >= 3


def test_a_host_failing_to_prepare_starts_nothing_anywhere(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    cluster.host("m2").fail("prepare", "exit", exit_code=1, stderr="mkdir: Permission denied")
    with pytest.raises(HostError, match=r"host m2: prepare: .*Permission denied.*nothing was started") as err:
        _start(cluster, _plan(), tmp_path, run_name="no-start")
    assert err.value.host == "m2"
    assert all(h.supervisors_started == 0 for h in cluster.hosts.values())
    record = runs.load("no-start")
    assert record.status == "failed-to-start" and not any(h.started for h in record.hosts)


def test_the_error_names_every_host_that_failed_grouping_the_same_error(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    for name in ("m1", "m2", "m3"):
        cluster.host(name).fail("prepare", "exit", exit_code=1, stderr="mkdir: Permission denied")
    cluster.host("m4").down = True
    with pytest.raises(HostError) as err:
        _start(cluster, _plan(5), tmp_path)
    line = err.value.one_line()
    assert line.startswith("host m1: prepare: ") and "\n" not in line, line
    assert "; also m2, m3: the same; m4: refused" in line, line


def test_a_failed_launch_rolls_back_what_was_started(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    cluster.host("m2").fail("launch", "exit", exit_code=1, stderr="python: cannot start")
    with pytest.raises(HostError, match=r"host m2: launch: .*stopped what was started on .*verified") as err:
        _start(cluster, _plan(), tmp_path, run_name="rolled-back")
    assert "m0" in str(err.value) and "m1" in str(err.value)
    assert _running(cluster) == {"m0": 0, "m1": 0, "m2": 0}
    assert cluster.host("m0").steps[-1] == "stop"  # one command: stop, then a fresh look (--verify)
    assert cluster.host("m2").steps == ["prepare", "ship", "stop"]  # its launch failed before it ran
    assert runs.load("rolled-back").status == "failed-to-start"


def test_a_task_that_fails_at_once_fails_the_start_naming_it(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    cluster.host("m1").task_exit["worker-0"] = 4
    with pytest.raises(HostError, match=r"host m1: task-failed: worker:0 exited with exit code 4"):
        _start(cluster, _plan(), tmp_path)
    assert _running(cluster) == {"m0": 0, "m1": 0, "m2": 0}


def test_allow_partial_keeps_the_hosts_that_started(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    cluster.host("m2").down = True
    result = _start(cluster, _plan(), tmp_path, allow_partial=True, run_name="part")
    assert result.outcomes["m2"].error is not None and result.outcomes["m2"].error.reason == "refused"
    assert result.outcomes["m0"].ok and result.outcomes["m1"].ok
    assert _running(cluster) == {"m0": 1, "m1": 1, "m2": 0}
    record = runs.load("part")
    assert record.status == "partial" and any("m2" in n and "refused" in n for n in record.notes)
    assert [h.started for h in record.hosts] == [True, True, False]


def test_a_host_that_refuses_is_given_up_quickly(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    cluster.host("m1").down = True
    with pytest.raises(HostError, match=r"host m1: refused"):
        _start(cluster, _plan(), tmp_path)
    assert cluster.host("m0").supervisors_started == 0


def test_ctrl_c_during_launch_stops_what_was_started(tmp_path: Path) -> None:
    cluster = ScriptedCluster()

    opts = launch.StartOptions(timeout=20, op_timeout=5, run_name="ctrl-c")
    with ctrl_c() as press:
        def progress(host: str, phase: str, done: int, total: int) -> None:
            if host == "m2" and phase == "running":
                press()  # Ctrl-C reaches the main thread while start waits for the hosts

        with pytest.raises(launch.StartInterrupted, match="interrupted: start cancelled; stopped what was started"):
            launch.start(_plan(), str(tmp_path / "hosts.toml"), opts, opener=cluster.opener, progress=progress)
    assert _running(cluster) == {"m0": 0, "m1": 0, "m2": 0}
    assert runs.load("ctrl-c").status == "interrupted"
