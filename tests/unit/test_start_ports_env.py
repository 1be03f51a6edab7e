"""`start`'s port check, `--auto-ports` and `[training] forward_env`, fast:
- the launcher's port report over a LocalTransport (a real /bin/sh and python, real binds on this host);
- the refusal and the re-plan through `launch.start` over scripted hosts (testkit/scripted_transport.py:
  their `busy_ports` stand for ports another run holds; many hosts at unit-test speed);
- the re-planned plan itself (pure), and the launcher's barrier taking the `run` and `env` frames.
The same paths run over the real sshd in tests/integration/test_start_ports_env_sshd.py."""

from __future__ import annotations

import io
import json
import os
import socket
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.plan.model import ClusterPlan
from orchestrator.run import launch
from orchestrator.run import records as runs
from orchestrator.run.port_check import PortsTaken, ports_to_try, replan
from orchestrator.run.run_file import RunFiles
from orchestrator.run.ship import FileSets
from testkit.scripted_transport import ScriptedCluster
from tests.helpers.local_start import prepared
from tests.plans import tiny_plan
from training import launcher


def _plan(command: str = "sleep 60 {ps_hosts}") -> ClusterPlan:
    return tiny_plan([("ps",), ("worker",), ("worker",)], transport="ssh", training={"command": command})


def _start(cluster: ScriptedCluster, plan: ClusterPlan, tmp_path: Path, **options: object) -> launch.StartResult:
    opts = launch.StartOptions(timeout=20, op_timeout=5, **options)  # type: ignore[arg-type]
    return launch.start(plan, str(tmp_path / "hosts.toml"), opts, opener=cluster.opener)


def _listen(address: str) -> socket.socket:
    s = socket.socket()
    s.bind((address, 0))
    s.listen()
    return s


def test_the_launcher_reports_taken_ports_and_offers_free_ones(tmp_path: Path) -> None:
    """Real binds: a listener on every interface takes a TF port; one on the supervisor's own address
    takes its control port; the free ports offered skip both."""
    with _listen("0.0.0.0") as tf_holder, _listen("127.0.0.1") as control_holder:
        busy_tf, busy_control = tf_holder.getsockname()[1], control_holder.getsockname()[1]
        start_from = min(busy_tf, busy_control)
        ports = {"local": [["ps:0", "", busy_tf], ["supervisor", "127.0.0.1", busy_control]]}
        with prepared(tmp_path / "work", FileSets(tree=[], package=[]), "r1", host_ports=ports, free_from=start_from,
                      free_count=3) as start:
            assert (tmp_path / "work" / "runs" / "r1" / "local" / "run.json").is_file()
    # a refused start: the host removes the run dir it made (and the run's, now empty)
    assert not (tmp_path / "work" / "runs" / "r1").exists() and (tmp_path / "work" / "cache").is_dir()
    assert [(label, port) for label, port, _why in start.outcome.taken] == [("ps:0", busy_tf),
                                                                           ("supervisor", busy_control)]
    free = start.outcome.free
    assert len(free) == 3 and free == sorted(free) and free[0] >= start_from
    assert busy_tf not in free and busy_control not in free


def test_a_start_whose_port_is_taken_is_refused_before_anything_runs(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    plan = _plan()
    worker = plan.task("worker", 1)
    cluster.host(worker.host).busy_ports.add(worker.port)
    with pytest.raises(PortsTaken) as refused:
        _start(cluster, plan, tmp_path)
    line = str(refused.value)
    assert refused.value.exit_code == 2 and "\n" not in line
    assert line.startswith(f"host {worker.host}: port {worker.port} (worker:1) is in use") and "--auto-ports" in line
    assert all("launch" not in h.steps and h.supervisors_started == 0 for h in cluster.hosts.values())
    [record] = runs.list_runs()[0]
    assert record.status == "failed-to-start" and not any(h.started for h in record.hosts)


def test_a_taken_supervisor_port_is_refused_too(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    plan = _plan()
    cluster.host("m2").busy_ports.add(plan.host("m2").control_port)
    with pytest.raises(PortsTaken, match=rf"^host m2: port {plan.host('m2').control_port} \(its supervisor\)"):
        _start(cluster, plan, tmp_path)


def test_auto_ports_replans_every_port_and_each_host_gets_its_new_run_file(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    plan = _plan()
    busy = {plan.task("ps", 0).port, plan.host("m1").control_port}
    for name in ("m0", "m1", "m2"):
        cluster.host(name).busy_ports |= busy  # loopback machines: one network stack, the same ports taken everywhere
    result = _start(cluster, plan, tmp_path, auto_ports=True)
    assert all(o.ok for o in result.outcomes.values())
    new = runs.load(result.record.run_id).plan
    ports = [t.port for t in new.tasks] + [h.control_port for h in new.hosts]
    assert len(set(ports)) == len(ports) and not busy & set(ports)
    for h in new.hosts:
        written = json.loads(cluster.host(h.name).run_json[runs.load(result.record.run_id).host(h.name).run_dir])
        mine = [t for t in written["plan"]["tasks"] if t["host"] == h.name]
        assert all(t["port"] == new.task(t["job"], t["index"]).port for t in mine)
        assert all(json.loads(t["env"]["TF_CONFIG"])["cluster"] == new.cluster_spec for t in mine)
        assert {x["name"]: x["control_port"] for x in written["plan"]["hosts"]}[h.name] == h.control_port


def test_auto_ports_without_enough_free_ports_starts_nothing(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    plan = _plan()
    cluster.host("m1").busy_ports |= set(range(plan.task("ps", 0).port, 65536))  # nothing free from there up
    with pytest.raises(PortsTaken, match=r"^host m1: not enough free ports from \d+ up for --auto-ports"):
        _start(cluster, plan, tmp_path, auto_ports=True)
    assert all(h.supervisors_started == 0 for h in cluster.hosts.values())
    [record] = runs.list_runs()[0]
    assert record.status == "failed-to-start"


def test_auto_ports_keeps_the_plan_when_its_ports_are_free(tmp_path: Path) -> None:
    cluster = ScriptedCluster()
    plan = _plan()
    result = _start(cluster, plan, tmp_path, auto_ports=True)
    assert runs.load(result.record.run_id).plan.cluster_spec == plan.cluster_spec


def test_replan_derives_every_copy_of_a_port_again() -> None:
    plan = _plan("run --ps {ps_hosts} --workers {worker_hosts}")
    offer = list(range(40000, 40010))
    new = replan(plan, dict.fromkeys(("m0", "m1", "m2"), offer))  # one shared stack: the same offer everywhere
    assert [t.port for t in new.tasks] == [40000, 40002, 40004]  # ps:0@m0, worker:0@m1, worker:1@m2
    assert [h.control_port for h in new.hosts] == [40001, 40003, 40005]
    assert new.cluster_spec == {"ps": ["127.0.0.2:40000"], "worker": ["127.0.0.3:40002", "127.0.0.4:40004"]}
    for t in new.tasks:
        assert json.loads(t.env["TF_CONFIG"]) == {"cluster": new.cluster_spec, "task": {"type": t.job, "index": t.index}}
        assert t.env["TFCLUSTER_ARG_PS_HOSTS"] == "127.0.0.2:40000"
        assert t.env["TFCLUSTER_ARG_WORKER_HOSTS"] == "127.0.0.3:40002,127.0.0.4:40004"
    assert ClusterPlan.from_json(json.loads(json.dumps(new.to_json(compact=True)))) == new  # as the record keeps it
    assert b"40004" in RunFiles({"run_id": "r"}, new).for_host("m2")
    assert ports_to_try(new)["m1"] == [["worker:0", "", 40002], ["supervisor", "127.0.0.3", 40003]]
    with pytest.raises(PortsTaken, match="host m1: not enough free ports"):
        replan(plan, {"m0": offer, "m1": [], "m2": offer})
    partial = replan(plan, {"m0": [plan.host("m1").control_port, *offer], "m2": offer})  # m1 not prepared
    assert partial.task("worker", 0).port == plan.task("worker", 0).port  # m1 keeps its ports, and no other host takes them
    assert plan.host("m1").control_port not in {partial.host("m0").control_port, partial.task("ps", 0).port}


def test_the_launcher_barrier_takes_a_new_run_file_and_forwarded_variables(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UNIT_FORWARDED_SECRET", raising=False)
    monkeypatch.setattr(os, "environ", dict(os.environ))  # the barrier writes into the environment
    env = json.dumps({"UNIT_FORWARDED_SECRET": "s3cret"}).encode()
    stdin = io.BytesIO(b'run 8\n{"a": 1}' + f"env {len(env)}\n".encode() + env + b"go 12.5\n")
    scratch = launcher.Scratch(str(tmp_path))
    assert launcher.barrier(stdin, str(tmp_path), scratch) == "go 12.5"
    assert (tmp_path / "run.json").read_text() == '{"a": 1}'
    assert os.environ["UNIT_FORWARDED_SECRET"] == "s3cret"
    assert launcher.barrier(io.BytesIO(b"abort\n"), str(tmp_path), scratch) == "abort"
    assert launcher.barrier(io.BytesIO(b""), str(tmp_path), scratch) == ""


def test_forward_env_goes_with_go_and_into_no_local_file(tmp_path: Path, state_dir: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "fwd-marker-7d1c0e"
    monkeypatch.setenv("UNIT_FORWARDED_TOKEN", secret)
    cluster = ScriptedCluster()
    plan = tiny_plan([("ps",), ("worker",)], transport="ssh",
                     training={"command": "sleep 60", "forward_env": ["UNIT_FORWARDED_TOKEN"]})
    result = _start(cluster, plan, tmp_path)
    assert all(o.ok for o in result.outcomes.values())
    assert all(cluster.host(n).forwarded_env == {"UNIT_FORWARDED_TOKEN": secret} for n in ("m0", "m1"))
    assert all(secret.encode() not in data for h in cluster.hosts.values() for data in h.run_json.values())
    assert all(secret.encode() not in p.read_bytes() for p in state_dir.rglob("*") if p.is_file())
    assert secret not in json.dumps(result.record.plan.to_json())
    monkeypatch.delenv("UNIT_FORWARDED_TOKEN")
    with pytest.raises(ConfigError, match=r"training.forward_env: UNIT_FORWARDED_TOKEN is not set in your environment"):
        _start(cluster, plan, tmp_path)


def test_auto_ports_in_a_sharded_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hosts spread over worker processes (transport.shards): the taken ports and free offers travel up
    with each host's outcome, the parent re-plans, and the new run files go down with `go`."""
    from orchestrator.transport import shards

    monkeypatch.setenv(shards.HOSTS_PER_PROCESS_ENV, "2")
    monkeypatch.setattr(shards, "usable_cores", lambda: 2)
    plan = tiny_plan([("ps",), *[("worker",)] * 5], transport="ssh", training={"command": "sleep 60"})
    cluster = ScriptedCluster()
    busy = {plan.task("worker", 2).port}
    for i in range(6):
        cluster.host(f"m{i}").busy_ports |= busy
    with pytest.raises(PortsTaken, match=rf"port {next(iter(busy))} \(worker:2\)"):
        _start(cluster, plan, tmp_path)
    result = _start(cluster, plan, tmp_path, auto_ports=True)
    assert all(o.ok for o in result.outcomes.values())
    new = runs.load(result.record.run_id).plan
    ports = [t.port for t in new.tasks] + [h.control_port for h in new.hosts]
    assert len(set(ports)) == len(ports) and not busy & set(ports)
