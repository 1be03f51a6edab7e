"""orchestrator/plan/resize_diff.py: what a resize changes (only workers), the ports it keeps, and the one
line naming what else changed. Plans are built by the product's own planner from data."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.config.schema import Config
from orchestrator.plan.from_file import plan_config
from orchestrator.plan.model import ClusterPlan
from orchestrator.plan.resize_diff import ResizeRefused, plan_resize

Host = tuple[Sequence[str], Mapping[str, Any]]


def plan(hosts: Sequence[Sequence[str] | Host], *, mode: str = "between-graph", base_port: int = 23000,
         training: Mapping[str, object] | None = None, name: str = "demo") -> ClusterPlan:
    """Hosts m0, m1, ... (skipping None) with these roles (and extra keys); the user's command by default."""
    entries = []
    for i, h in enumerate(hosts):
        roles, extra = (h if isinstance(h, tuple) else (h, {}))
        entries.append({"name": f"m{i}", "address": f"127.0.0.{i + 2}", "roles": list(roles), "transport": "local",
                        "workdir": f"/tmp/tfcluster-test-m{i}", **extra})
    return plan_config(Config.model_validate({
        "cluster": {"name": name, "mode": mode, "base_port": base_port}, "hosts": entries,
        "training": dict(training if training is not None else {"command": "{python} prog.py {job} {task}"}),
    }))


def ports(p: ClusterPlan) -> list[int]:
    return [t.port for t in p.tasks] + [h.control_port for h in p.hosts]


def test_a_new_worker_host_joins_and_every_running_port_is_kept() -> None:
    old = plan([["ps"], ["worker"]])
    change = plan_resize(old, plan([["ps"], ["worker"], ["worker"]]))
    assert (change.added, change.removed, change.moved) == (("worker:1",), (), ())
    assert (change.hosts_added, change.hosts_removed, change.hosts_changed) == (("m2",), (), ())
    new = change.new
    for t in old.tasks:
        assert new.task(t.job, t.index).port == t.port
    for h in old.hosts:
        assert new.host(h.name).control_port == h.control_port
    assert len(set(ports(new))) == len(ports(new))  # unique across the cluster, as the builder makes them
    w1 = new.task("worker", 1)
    assert w1.port not in ports(old) and new.host("m2").control_port not in ports(old)
    assert w1.tf_config["cluster"]["worker"] == [old.task("worker", 0).target, w1.target]
    assert f'"{w1.target}"' in w1.env["TF_CONFIG"]
    assert change.lines() == ["host m2 joins", "worker:1 starts on m2"]


def test_a_worker_host_leaves() -> None:
    old = plan([["ps"], ["worker"], ["worker"]])
    change = plan_resize(old, plan([["ps"], ["worker"]]))
    assert (change.added, change.removed, change.hosts_removed) == ((), ("worker:1",), ("m2",))
    assert [t.port for t in change.new.tasks] == [old.task("ps", 0).port, old.task("worker", 0).port]
    assert change.new.task("worker", 0).tf_config["cluster"]["worker"] == [old.task("worker", 0).target]
    assert change.lines() == ["worker:1 on m2 is stopped", "host m2 leaves"]
    assert change.summary()["hosts_removed"] == ["m2"]


def test_a_worker_added_on_a_running_host_changes_that_host() -> None:
    change = plan_resize(plan([["ps"], ["worker"]]), plan([["ps"], (["worker"], {"workers": 2})]))
    assert change.added == ("worker:1",) and change.hosts_added == () and change.hosts_changed == ("m1",)


def test_removing_a_middle_host_moves_the_next_worker_which_gets_a_fresh_port() -> None:
    old = plan([["ps"], ["worker"], ["worker"], ["worker"]])
    change = plan_resize(old, plan([["ps"], ["worker"], ["worker"]]))  # m3 gone: the last one leaves
    assert change.removed == ("worker:2",) and change.moved == ()
    m3 = {"address": "127.0.0.5", "name": "m3", "workdir": "/tmp/tfcluster-test-m3"}
    new = plan([["ps"], ["worker"], (["worker"], m3)])
    moved = plan_resize(old, new)  # m2 gone: worker:1 is now m3's task
    assert moved.moved == ("worker:1",) and moved.removed == ("worker:2",) and moved.hosts_removed == ("m2",)
    assert moved.new.task("worker", 1).port not in ports(old)
    assert "worker:1 moves m2 -> m3 (restarted there)" in moved.lines()
    assert set(moved.hosts_changed) == {"m3"}


def test_no_change_is_empty() -> None:
    assert plan_resize(plan([["ps"], ["worker"]]), plan([["ps"], ["worker"]])).empty


@pytest.mark.parametrize(("new", "named"), [
    (plan([["ps"], ["worker"]], mode="in-graph"), "cluster.mode"),
    (plan([["ps"], ["worker"]], name="other"), "cluster.name"),
    (plan([["ps"], ["worker"]], base_port=24000), "cluster.base_port"),
    (plan([["ps"], ["worker"]], training={"command": "{python} other.py {job} {task}"}), "training.command"),
    (plan([["ps"], ["worker"]], training={"command": "{python} prog.py {job} {task}", "max_restarts": 1}),
     "training.max_restarts"),
    (plan([["worker"], ["ps"]]), "ps ps:0 would move from m0 to m1"),
    (plan([["ps"], ["worker"], ["ps"]]), "ps ps:1 on m2 would be added"),
    (plan([["ps"], (["worker"], {"workdir": "/elsewhere"})]), "hosts.m1.workdir"),
    (plan([["ps"], (["worker"], {"python": "/opt/python"})]), "hosts.m1.python"),
    (plan([(["ps"], {"env": {"A": "1"}}), ["worker"]]), "ps ps:0 on m0: its environment"),
    (plan([["ps"], (["worker"], {"env": {"A": "1"}})]), "the chief worker:0 on m1: its environment"),
])
def test_anything_but_workers_is_refused_in_one_line_naming_it(new: ClusterPlan, named: str) -> None:
    with pytest.raises(ResizeRefused) as refused:
        plan_resize(plan([["ps"], ["worker"]]), new)
    line = refused.value.one_line()
    assert named in line and "\n" not in line
    assert refused.value.exit_code == 2


def test_a_worker_that_stays_keeps_its_environment() -> None:
    old = plan([["ps"], ["worker"], ["worker"]])
    with pytest.raises(ResizeRefused, match="worker:1 on m2: its environment or command would change"):
        plan_resize(old, plan([["ps"], ["worker"], (["worker"], {"env": {"A": "1"}})]))


def test_a_ps_is_never_removed() -> None:
    with pytest.raises(ResizeRefused, match="ps ps:1 on m2 would be removed: only workers may change"):
        plan_resize(plan([["ps"], ["worker"], ["ps"]]), plan([["ps"], ["worker"]]))


def test_the_chief_is_kept() -> None:
    old = plan([["ps"], ["chief"], ["worker"]])
    with pytest.raises(ResizeRefused, match="chief chief:0 would move from m1 to m2"):
        plan_resize(old, plan([["ps"], ["worker"], ["chief"]]))
    with pytest.raises(ResizeRefused, match="the chief worker:0 would move"):  # worker:0 is the chief here
        plan_resize(plan([["ps"], ["worker"], ["worker"]]), plan([["ps"], ["ps"], ["worker"]]))
    grown = plan_resize(old, plan([["ps"], ["chief"], ["worker"], ["worker"]]))
    assert grown.added == ("worker:1",)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=4), st.lists(st.integers(0, 3), min_size=1, max_size=4))
def test_any_change_of_worker_counts_is_a_resize_that_keeps_ports(before: list[int], after: list[int]) -> None:
    """m0 is the ps (and, so the chief stays, the host of worker:0); m1... hold 0-3 workers each."""
    def hosts(counts: list[int]) -> list[Host]:
        return [(["ps", "worker"], {})] + [(["worker"], {"workers": n}) for n in counts if n]

    old, new = plan(hosts(before)), plan(hosts(after))
    change = plan_resize(old, new)
    old_names, new_names = {t.name for t in old.tasks}, {t.name for t in new.tasks}
    assert set(change.added) == new_names - old_names and set(change.removed) == old_names - new_names
    assert len(set(ports(change.new))) == len(ports(change.new))
    stays = {t.name for t in old.tasks} - set(change.removed) - set(change.moved)
    for name in stays:
        job, index = name.split(":")
        assert change.new.task(job, int(index)).port == old.task(job, int(index)).port
    spec = change.new.cluster_spec
    assert all(t.tf_config["cluster"] == spec for t in change.new.tasks)
    assert change.empty == ([n for n in before if n] == [n for n in after if n])
