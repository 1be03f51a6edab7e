"""Waiting on a live Collector (orchestrator/monitor/collect.py): its state, polled until a predicate holds;
a failure shows the state as `dash --once --json` prints it."""

from __future__ import annotations

import json
from collections.abc import Callable

from orchestrator.monitor.collect import Collector
from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.state_json import state_json
from tests.helpers.waiting import wait_for


def state_when(collector: Collector, holds: Callable[[ClusterState], bool], timeout: float, what: str) -> ClusterState:
    """The collector's first state for which `holds(state)`."""
    def matched() -> tuple[ClusterState] | None:
        st = collector.poll()
        return (st,) if holds(st) else None

    found: tuple[ClusterState] = wait_for(matched, timeout, what,
                                          explain=lambda: json.dumps(state_json(collector.poll()))[:3000])
    return found[0]
