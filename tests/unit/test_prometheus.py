"""Prometheus exposition of ClusterState, served over a real loopback HTTP socket."""

from __future__ import annotations

import urllib.request

from orchestrator.monitor.prometheus import PrometheusExporter, render
from orchestrator.run.local_ports import free_port_block
from testkit.replay import FakeClock, ReplaySource
from testkit.synthetic import Scenario, build


def synthetic_state():  # type: ignore[no-untyped-def]
    sc = Scenario(workers=2, ps=1, hosts=1, stall="worker:1", stall_at=20)
    st, events = build(sc)
    return ReplaySource(st, events, FakeClock(sc.start + 30))


def test_render_has_task_state_rates_and_ps_traffic() -> None:
    st = synthetic_state().poll()
    text = render(st)
    assert 'tfcluster_task_state{task="worker:1",job="worker",host="h0",state="stalled"} 1' in text
    assert 'tfcluster_task_state{task="worker:0",job="worker",host="h0",state="running"} 1' in text
    assert 'tfcluster_task_steps_per_second{task="worker:0",job="worker",host="h0"} 3' in text
    assert 'tfcluster_ps_bytes_per_second{ps="ps:0",host="p0",direction="in",source="measured"}' in text
    assert "# TYPE tfcluster_malformed_lines_total counter" in text


def test_exporter_serves_the_last_polled_state() -> None:
    port = free_port_block(1)
    exporter = PrometheusExporter(port).start()
    try:
        source = exporter.wrap(synthetic_state())
        source.poll()
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert "tfcluster_global_step" in body and 'state="stalled"} 1' in body
    finally:
        exporter.close()
