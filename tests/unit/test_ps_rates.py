"""The PS traffic rate kept on the host (training/telemetry/ps_rates.py), with the clock as a parameter and
the kernel's counters given; then what one read of the host makes of it: the facts file's `ps_tcp`,
folded by `status` (orchestrator/monitor/status.py) into measured traffic in the JSON document and in
Prometheus, with no second sample. No network, no TensorFlow."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.schema import Config
from orchestrator.monitor import views
from orchestrator.monitor.prometheus import render
from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.state_json import state_json
from orchestrator.monitor.status import fold
from orchestrator.plan.from_file import plan_config
from orchestrator.run.read_host import HostReading
from tests.helpers.state_events import T0, feed, hb
from training.agent.tcp import TcpConn
from training.run.layout import RunLayout
from training.telemetry import ps_rates
from training.telemetry.host_facts import FactsWriter
from training.telemetry.ps_rates import PsRates
from training.telemetry.schema import make_event
from training.telemetry.state_files import SupervisorStateFile

PS_PORT, WORKER_PORT = 23000, 23001


class Kernel:
    """The connections `ss` would list: the PS server's accepted one from a worker, and one the PS opened
    to the worker's port; `move` adds bytes to them as traffic would. Its clock is the test's: `at(t)`
    sets it, and a read takes `read_s` of it (ss under load)."""

    def __init__(self) -> None:
        self.served = [0, 0]  # in, out on the PS port
        self.opened = [0, 0]  # in, out on the PS's own connection to the worker
        self.calls: list[tuple[list[int], list[int]]] = []
        self.t = 0.0
        self.read_s = 0.0

    def clock(self) -> float:
        return self.t

    def at(self, rates: PsRates, t: float) -> dict[str, Any]:
        self.t = t
        return rates.sample()

    def move(self, served: tuple[int, int], opened: tuple[int, int] = (0, 0)) -> None:
        self.served = [self.served[0] + served[0], self.served[1] + served[1]]
        self.opened = [self.opened[0] + opened[0], self.opened[1] + opened[1]]

    def read(self, ports: Iterable[int], peer_ports: Iterable[int]) -> list[TcpConn]:
        self.calls.append((sorted(ports), sorted(peer_ports)))
        self.t += self.read_s
        return [TcpConn(PS_PORT, "127.0.0.3", 40000, self.served[1], self.served[0], pid=7),
                TcpConn(40001, "127.0.0.3", WORKER_PORT, self.opened[1], self.opened[0], pid=7)]


def _rates(kernel: Kernel) -> PsRates:
    return PsRates({"ps-0": PS_PORT}, {WORKER_PORT}, read=kernel.read, clock=kernel.clock)


def test_the_first_sample_is_the_baseline_and_the_second_gives_the_rate_over_its_interval() -> None:
    kernel = Kernel()
    rates = _rates(kernel)
    kernel.move((5000, 5000))  # before the first sample: not counted
    first = kernel.at(rates, 100.0)["ps-0"]
    assert (first["port"], first["bytes_in"], first["bytes_out"]) == (PS_PORT, 0, 0) and "in_Bps" not in first
    kernel.move((1000, 4000), (500, 0))  # the PS pulls gradients on the connection it opened, too
    second = kernel.at(rates, 102.0)["ps-0"]
    assert (second["bytes_in"], second["bytes_out"]) == (1500, 4000)
    assert (second["in_Bps"], second["out_Bps"]) == (750.0, 2000.0)  # the first rate is taken as it is
    assert (second["last_in_Bps"], second["last_out_Bps"], second["dt_s"]) == (750.0, 2000.0, 2.0)
    assert second["peers"]["127.0.0.3"] == {"in": 1500, "out": 4000, "in_Bps": 750.0, "out_Bps": 2000.0}
    assert kernel.calls[0] == ([PS_PORT], [WORKER_PORT])


def test_later_rates_are_smoothed_as_the_dashboard_smooths_them_over_uneven_intervals() -> None:
    kernel = Kernel()
    rates = _rates(kernel)
    kernel.at(rates, 0.0)
    kernel.move((1000, 1000))
    kernel.at(rates, 1.0)  # 1000 B/s
    kernel.move((1500, 0))
    got = kernel.at(rates, 1.5)["ps-0"]  # 3000 B/s in, 0 out over half a second
    alpha = 1.0 - math.exp(-0.5 / ps_rates.EMA_TAU_S)
    assert got["in_Bps"] == pytest.approx(1000.0 + alpha * 2000.0, abs=0.1)
    assert got["out_Bps"] == pytest.approx(1000.0 * (1 - alpha), abs=0.1)
    assert (got["last_in_Bps"], got["last_out_Bps"]) == (3000.0, 0.0)
    # ... by the very reducer's function, so `status` prints what the live dashboard shows
    assert ps_rates.EMA_TAU_S == views.EMA_TAU_S
    assert got["in_Bps"] == pytest.approx(views.ema(views.ema(None, 1000.0, 1.0), 3000.0, 0.5), abs=0.1)


def test_the_interval_ends_when_the_counters_are_read_not_when_the_sample_began() -> None:
    kernel = Kernel()
    rates = _rates(kernel)
    kernel.at(rates, 0.0)
    kernel.move((3000, 3000))
    kernel.read_s = 0.5  # `ss` answers half a second late: its counters are those of t = 1.5
    got = kernel.at(rates, 1.0)["ps-0"]
    assert (got["last_in_Bps"], got["dt_s"]) == (2000.0, 1.5)


def test_a_clock_that_did_not_move_gives_no_rate_and_a_host_without_ps_runs_no_ss() -> None:
    kernel = Kernel()
    rates = _rates(kernel)
    kernel.at(rates, 10.0)
    kernel.move((100, 100))
    assert "in_Bps" not in kernel.at(rates, 10.0)["ps-0"]  # a new baseline, no division by zero
    none = PsRates({}, {WORKER_PORT}, read=kernel.read, clock=kernel.clock)
    calls = len(kernel.calls)
    assert kernel.at(none, 11.0) == {} and len(kernel.calls) == calls


def test_the_facts_file_holds_the_rate_and_the_plan_names_this_hosts_ps_tasks(tmp_path: Path) -> None:
    plan = {"tasks": [{"job": "ps", "index": 0, "host": "m0", "port": PS_PORT},
                      {"job": "worker", "index": 0, "host": "m1", "port": WORKER_PORT},
                      {"job": "worker", "index": 1, "host": "m0", "port": None}]}
    assert ps_rates.ps_ports(plan, "m0") == ({"ps-0": PS_PORT}, {WORKER_PORT})
    assert ps_rates.ps_ports(plan, "m1") == ({}, {PS_PORT, WORKER_PORT})
    layout = RunLayout(str(tmp_path / "run"))
    Path(layout.facts_file("m0")).parent.mkdir(parents=True)
    kernel = Kernel()
    writer = FactsWriter(layout, "m0", {"ps-0": PS_PORT}, find_gpus=False, ps=_rates(kernel))
    kernel.t = 50.0
    writer.update(50.0)
    kernel.move((2000, 6000))
    kernel.t = 51.0
    writer.update(51.0)
    doc = json.loads(Path(layout.facts_file("m0")).read_text())
    assert (doc["ps_tcp"]["ps-0"]["in_Bps"], doc["ps_tcp"]["ps-0"]["out_Bps"]) == (2000.0, 6000.0)
    FactsWriter(layout, "m1", {"worker-0": WORKER_PORT}, find_gpus=False).update(50.0)
    assert "ps_tcp" not in json.loads(Path(layout.facts_file("m1")).read_text())


def _state() -> ClusterState:
    cfg = Config.model_validate({"hosts": [
        {"name": "m0", "address": "127.0.0.2", "roles": ["ps"], "transport": "local"},
        {"name": "m1", "address": "127.0.0.3", "roles": ["worker"], "transport": "local"}]})
    return ClusterState.from_plan(plan_config(cfg), "r1", now=time.time())


def _reading(alive: bool) -> HostReading:
    ps_tcp = {"ps-0": {"port": PS_PORT, "bytes_in": 9000, "bytes_out": 30000, "in_Bps": 1500.0, "out_Bps": 5000.0,
                       "peers": {"127.0.0.3": {"in": 9000, "out": 30000, "in_Bps": 1400.0, "out_Bps": 4900.0}}}}
    now = time.time()
    return HostReading(now=now, supervisor=SupervisorStateFile("m0", 1, "running"), supervisor_alive=alive,
                       facts={"t": now, "tasks": {"ps-0": {"procs": 1, "cpu_s": 1.0}}, "ps_tcp": ps_tcp},
                       processes=None if alive else ())


def test_one_read_of_the_facts_shows_the_measured_traffic_in_json_and_prometheus() -> None:
    st = _state()
    now = time.time()
    fold(st, "m0", _reading(alive=True), now)
    st.tick(now)
    ps = state_json(st)["ps"][0]
    assert (ps["name"], ps["host"], ps["port"]) == ("ps:0", "m0", PS_PORT)
    assert (ps["measured_in_Bps"], ps["measured_out_Bps"]) == (1500.0, 5000.0)
    assert ps["peers"] == {"127.0.0.3": {"in_Bps": 1400.0, "out_Bps": 4900.0}}
    text = render(st)
    assert 'tfcluster_ps_bytes_per_second{ps="ps:0",host="m0",direction="in",source="measured"} 1500' in text
    assert 'tfcluster_ps_bytes_per_second{ps="ps:0",host="m0",direction="out",source="measured"} 5000' in text


def test_a_dead_supervisors_last_rate_is_not_shown_as_current() -> None:
    st = _state()
    now = time.time()
    fold(st, "m0", _reading(alive=False), now)
    st.tick(now)
    ps = state_json(st)["ps"][0]
    assert (ps["measured_in_Bps"], ps["measured_out_Bps"]) == (None, None)


def test_an_agents_counters_after_a_read_make_their_own_rate() -> None:
    """The live dashboard's first frame is a read (the host's rate); the agent's counters that follow start
    elsewhere: they are never taken as a delta from the read's."""
    st = ClusterState(now=T0)
    sample = {"ps-0": {"port": PS_PORT, "bytes_in": 10**9, "bytes_out": 10**9, "in_Bps": 800.0, "out_Bps": 900.0}}
    feed(st, hb("p", T0))
    feed(st, make_event("host_sample", "p", t=T0, ps_tcp=sample))
    assert (st.ps["ps:0"].measured_in, st.ps["ps:0"].measured_out) == (800.0, 900.0)
    for i in (1, 2):
        feed(st, hb("p", T0 + i))
        feed(st, make_event("host_sample", "p", t=T0 + i, ps_tcp={
            "ps-0": {"port": PS_PORT, "bytes_in": 800 * i, "bytes_out": 900 * i}}))
    assert (st.ps["ps:0"].measured_in, st.ps["ps:0"].measured_out) == (pytest.approx(800.0), pytest.approx(900.0))
