"""`tfcluster demo --mode M`: the local demo cluster of every mode plans with the real planner (the same
rules `start` applies), with 2 workers and exactly what the mode needs beside them. No TensorFlow."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from orchestrator.errors import UsageError
from orchestrator.plan.from_file import plan_file
from tfcluster.commands.demo import DEMO_ROLES, demo_hosts_toml

EXPECTED_JOBS = {
    "between-graph": ["ps", "worker", "worker"],
    "in-graph": ["chief", "ps", "worker", "worker"],
    "multi-worker-mirrored": ["worker", "worker"],
    "parameter-server-strategy": ["chief", "ps", "worker", "worker"],
}


@pytest.mark.parametrize("mode", list(DEMO_ROLES))
def test_every_modes_demo_cluster_plans(mode: str, tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(demo_hosts_toml(mode, base_port=31000, python=sys.executable, workdir=str(tmp_path / "w"),
                                     steps=50))
    plan = plan_file(hosts)
    assert plan.mode == mode
    assert sorted(t.job for t in plan.tasks) == EXPECTED_JOBS[mode]
    assert all(t.host == "local" and t.port is not None and 31000 <= t.port < 31005 for t in plan.tasks)


def test_an_unknown_mode_is_one_line() -> None:
    with pytest.raises(UsageError, match="demo --mode: 'sync' is not one of between-graph"):
        demo_hosts_toml("sync", base_port=31000, python="python3", workdir="/tmp/w", steps=1)
