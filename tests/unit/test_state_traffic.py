"""The reducer's traffic figures: per PS task measured by the kernel and accounted by the workers, and
each multi-worker-mirrored worker's measured all-reduce traffic. Pure: events in, state out."""

from __future__ import annotations

import pytest

from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.state_json import state_json
from tests.helpers.state_events import T0, feed, hb, progress
from training.telemetry.schema import make_event


def test_measured_ps_traffic_rates_and_peers() -> None:
    st = ClusterState(now=T0)
    for i in range(3):
        t = T0 + i
        feed(st, hb("p", t))
        feed(st, make_event("host_sample", "p", t=t, cpu_pct=10.0, mem_pct=20.0, gpus=[], ps_tcp={
            "ps-0": {"port": 2222, "bytes_in": 1000 * i, "bytes_out": 4000 * i,
                     "peers": {"127.0.0.2": {"in": 1000 * i, "out": 4000 * i}}}}))
    ps = st.ps["ps:0"]
    assert (ps.measured_in, ps.measured_out) == (pytest.approx(1000.0), pytest.approx(4000.0))
    assert ps.peers == {"127.0.0.2": (pytest.approx(1000.0), pytest.approx(4000.0))}
    assert st.hosts["p"].cpu_pct == 10.0
    # a peer first seen in this sample counts from 0 (the agent's counters start there)
    feed(st, make_event("host_sample", "p", t=T0 + 2.5, cpu_pct=10.0, mem_pct=20.0, gpus=[], ps_tcp={
        "ps-0": {"port": 2222, "bytes_in": 2500, "bytes_out": 8000,
                 "peers": {"127.0.0.2": {"in": 2000, "out": 8000}, "127.0.0.4": {"in": 500, "out": 0}}}}))
    assert ps.peers["127.0.0.4"] == (pytest.approx(1000.0), 0.0)
    # counters going backwards (agent restarted) do not produce a negative rate
    feed(st, make_event("host_sample", "p", t=T0 + 3, cpu_pct=1.0, mem_pct=1.0,
                        ps_tcp={"ps-0": {"port": 2222, "bytes_in": 5, "bytes_out": 5}}))
    assert ps.measured_in == pytest.approx(1000.0)


def test_measured_allreduce_traffic_per_worker() -> None:
    """multi-worker-mirrored: each worker's kernel-measured traffic, beside (never inside) the PS table."""
    st = ClusterState(now=T0)
    for i in range(3):
        feed(st, hb("a", T0 + i))
        feed(st, make_event("host_sample", "a", t=T0 + i, cpu_pct=1.0, mem_pct=1.0, allreduce_tcp={
            "worker-0": {"port": 2300, "bytes_in": 3000 * i, "bytes_out": 2000 * i}}))
    w = st.allreduce["worker:0"]
    assert (w.measured_in, w.measured_out) == (pytest.approx(3000.0), pytest.approx(2000.0))
    assert not st.ps
    assert state_json(st)["allreduce"][0]["measured_in_Bps"] == pytest.approx(3000.0)


def test_accounted_ps_traffic_sums_fresh_workers() -> None:
    st = ClusterState(now=T0)
    for w in (0, 1):
        feed(st, hb("a", T0))
        feed(st, progress(T0, 10, task=w, ps_bytes={"ps-0": {"pulled": 800, "pushed": 200}}))
    st.tick(T0)
    ps = st.ps["ps:0"]
    assert (ps.accounted_in, ps.accounted_out) == (400.0, 1600.0)
    st.tick(T0 + 3.5)  # worker reports are older than 3 intervals
    assert (ps.accounted_in, ps.accounted_out) == (0.0, 0.0)
