"""Real plans for tests that need one but no machines: built by the product's own planner from a
Config given as data (never hand-written plan JSON)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.config.schema import Config
from orchestrator.plan.from_file import plan_config
from orchestrator.plan.model import ClusterPlan


def tiny_plan(roles: Sequence[Sequence[str]] = (("ps",), ("worker",), ("worker",)), *, mode: str = "between-graph",
              transport: str = "local", training: Mapping[str, object] | None = None,
              base_port: int = 23000) -> ClusterPlan:
    """Hosts m0, m1, ... with the given roles, one task per role each."""
    return plan_config(Config.model_validate({
        "cluster": {"name": "demo", "mode": mode, "base_port": base_port},
        "hosts": [{"name": f"m{i}", "address": f"127.0.0.{i + 2}", "roles": list(r), "transport": transport,
                   "workdir": f"/tmp/tfcluster-test-m{i}"} for i, r in enumerate(roles)],
        "training": dict(training or {}),
    }))
