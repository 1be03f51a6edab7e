"""The reducer's traffic figures: per PS task measured by the kernel and accounted by the workers, and
each multi-worker-mirrored worker's measured all-reduce traffic. Pure: events in, state out."""

from __future__ import annotations

from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.state_json import state_json
from tests.helpers.state_events import T0, feed, hb, progress
from training.telemetry.schema import make_event


def _measured(i: int, rate_in: float | None, rate_out: float | None, **more: object) -> dict[str, object]:
    """One host measurement as the supervisor writes it (training/telemetry/traffic.py)."""
    return {"port": 2222, "t": T0 + i, "bytes_in": 1000 * i, "bytes_out": 4000 * i, "in_Bps": rate_in,
            "out_Bps": rate_out, **more}


def test_measured_ps_traffic_is_the_hosts_rate_and_peers() -> None:
    """The host measured and smoothed the rates: the reducer shows them as they are (a view of one read
    and the dashboard show the same numbers), none before the host's second sample."""
    st = ClusterState(now=T0)
    feed(st, hb("p", T0))
    feed(st, make_event("host_sample", "p", t=T0, cpu_pct=10.0, mem_pct=20.0, gpus=[],
                        ps_tcp={"ps-0": _measured(0, None, None)}))
    ps = st.ps["ps:0"]
    assert (ps.measured_in, ps.measured_out, ps.port, ps.host) == (None, None, 2222, "p")
    peers = {"127.0.0.2": {"bytes_in": 1000, "bytes_out": 4000, "in_Bps": 900.0, "out_Bps": 3900.0}}
    feed(st, hb("p", T0 + 1))
    feed(st, make_event("host_sample", "p", t=T0 + 1, cpu_pct=10.0, mem_pct=20.0, gpus=[],
                        ps_tcp={"ps-0": _measured(1, 1000.0, 4000.0, peers=peers)}))
    assert (ps.measured_in, ps.measured_out) == (1000.0, 4000.0)
    assert ps.peers == {"127.0.0.2": (900.0, 3900.0)}
    assert st.hosts["p"].cpu_pct == 10.0
    assert state_json(st)["ps"][0]["measured_in_Bps"] == 1000.0
    # the agent samples on its own clock: the same measurement again changes nothing
    feed(st, make_event("host_sample", "p", t=T0 + 1.5, cpu_pct=1.0, mem_pct=1.0,
                        ps_tcp={"ps-0": _measured(1, 5.0, 5.0)}))
    assert ps.measured_in == 1000.0
    st.tick(T0 + 1 + 2 * 3 + 0.5)  # no new measurement for two staleness windows: no current rate
    assert ps.measured_in is None


def test_measured_allreduce_traffic_per_worker() -> None:
    """multi-worker-mirrored: each worker's kernel-measured traffic, beside (never inside) the PS table."""
    st = ClusterState(now=T0)
    for i in range(3):
        feed(st, hb("a", T0 + i))
        feed(st, make_event("host_sample", "a", t=T0 + i, cpu_pct=1.0, mem_pct=1.0, allreduce_tcp={
            "worker-0": {"port": 2300, "t": T0 + i, "bytes_in": 3000 * i, "bytes_out": 2000 * i,
                         "in_Bps": 3000.0 if i else None, "out_Bps": 2000.0 if i else None}}))
    w = st.allreduce["worker:0"]
    assert (w.measured_in, w.measured_out) == (3000.0, 2000.0)
    assert not st.ps
    assert state_json(st)["allreduce"][0]["measured_in_Bps"] == 3000.0


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
