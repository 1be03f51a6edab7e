"""A cell's figures from raw samples: counter differences inside the window, PS measured vs accounted,
restarts, client CPU, loss against time. Synthetic samples with known rates (pure functions, no cluster)."""

from __future__ import annotations

import pytest

from orchestrator.bench.measures import (
    Window,
    cell_figures,
    cpu_pct,
    kill_figures,
    loss_curve,
    ps_measured,
    task_rates,
    time_to_loss,
)
from orchestrator.bench.samples import CellSamples, HostSample, ProgressSample, StateSample

T0 = 1_000.0
BYTES = 1_000_000  # accounted bytes per step, each way


def progress(task: str, steps_per_s: float, seconds: int, *, start: float = T0, step0: int = 0,
             batch: int = 32, loss0: float = 2.3) -> list[ProgressSample]:
    out = []
    for i in range(seconds + 1):
        steps = step0 + round(steps_per_s * i)
        per_interval = round(steps_per_s) if i else 0
        out.append(ProgressSample(start + i, task, steps, 0, steps * batch, loss0 / (1 + i), 1.0,
                                  {"ps:0": (per_interval * BYTES, per_interval * BYTES)}))
    return out


def host_samples(seconds: int, ps_rate: float, cpu_rate: dict[str, float]) -> list[HostSample]:
    return [HostSample(T0 + i, "m0", 50.0, {"ps:0": (int(ps_rate * i), int(ps_rate * i))},
                       {t: r * i for t, r in cpu_rate.items()}) for i in range(seconds + 1)]


def test_rates_come_from_counters_inside_the_window() -> None:
    series = progress("worker:0", 10.0, 20)
    local, examples, _ = task_rates(series, Window(T0 + 5, T0 + 15))
    assert local == pytest.approx(10.0)
    assert examples == pytest.approx(320.0)
    assert task_rates(series[:1], Window(T0, T0 + 20)) == (None, None, None)


def test_a_restarted_task_is_measured_from_its_restart() -> None:
    before = progress("worker:1", 10.0, 5)
    after = progress("worker:1", 4.0, 10, start=T0 + 8)  # a new process: counters from 0
    local, _, _ = task_rates(before + after, Window(T0, T0 + 18))
    assert local == pytest.approx(4.0)


def test_cell_figures_sum_the_trainers_and_compare_ps_traffic() -> None:
    samples = CellSamples(progress=sorted(progress("worker:0", 10.0, 20) + progress("worker:1", 5.0, 20),
                                          key=lambda p: p.t),
                          hosts=host_samples(20, 15.0 * BYTES, {"chief:0": 0.0, "worker:0": 0.5}))
    figs = cell_figures(samples, Window(T0 + 2, T0 + 20), "between-graph", ["ps:0"], target_loss=0.5)
    assert figs.examples_per_s == pytest.approx(15 * 32)
    assert figs.per_worker_steps_per_s == pytest.approx({"worker:0": 10.0, "worker:1": 5.0})
    ps = figs.ps["ps:0"]
    assert ps.accounted_in_Bps == pytest.approx(15 * BYTES)  # both workers' pushes
    assert ps.measured_over_accounted == pytest.approx(1.0)
    assert figs.cpu_pct["worker:0"] == pytest.approx(50.0)
    assert figs.client_cpu_pct is None  # no client in between-graph
    assert figs.time_to_target_loss_s is not None and 2.0 <= figs.time_to_target_loss_s <= 5.0


def test_counters_are_timed_when_the_supervisor_read_them_not_when_the_agent_forwarded_them() -> None:
    # The supervisor reads ps:0's bytes and the tasks' CPU once a second (at .9 past); the agent samples
    # twice a second and forwards the newest reading, so its own times run up to a second late and
    # repeat a reading.
    rate, cpu = 1_000_000.0, 0.5
    hosts = []
    for k in range(20):
        read = T0 - 0.1 + int(k * 0.5)  # the supervisor's newest reading at the agent's sample
        since = read - T0 + 0.1
        hosts.append(HostSample(T0 + k * 0.5, "m0", 50.0, {"ps:0": (int(rate * since), int(rate * since))},
                                {"ps:0": cpu * since}, read))
    window = Window(T0, T0 + 4.2)
    assert ps_measured(hosts, "ps:0", window) == (pytest.approx(rate), pytest.approx(rate))
    assert cpu_pct(hosts, "ps:0", window) == pytest.approx(100 * cpu)
    # The report keeps the reading's time; a report written before it existed still reads.
    assert HostSample.from_json(hosts[3].to_json()).t_facts == pytest.approx(hosts[3].t_facts)
    assert HostSample.from_json([T0, "m0", None, {"ps:0": [1, 2]}, {}]).t_read == T0


def test_in_graph_towers_step_at_the_client_rate_and_the_client_cpu_is_reported() -> None:
    samples = CellSamples(progress=progress("chief:0", 8.0, 10),
                          hosts=host_samples(10, 0.0, {"chief:0": 0.9, "worker:0": 0.2, "worker:1": 0.2, "ps:0": 0.1}))
    figs = cell_figures(samples, Window(T0, T0 + 10), "in-graph", ["ps:0"])
    assert figs.per_worker_steps_per_s == pytest.approx({"worker:0": 8.0, "worker:1": 8.0})
    assert figs.client_cpu_pct == pytest.approx(90.0)


def test_coordinator_events_are_not_counted_twice() -> None:
    coordinator = [ProgressSample(p.t, "chief:0", p.local_step, p.global_step, p.examples, p.loss, 1.0, {}, True)
                   for p in progress("chief:0", 20.0, 10)]
    samples = CellSamples(progress=coordinator + progress("worker:0", 10.0, 10) + progress("worker:1", 10.0, 10))
    figs = cell_figures(samples, Window(T0, T0 + 10), "parameter-server-strategy", [])
    assert figs.examples_per_s == pytest.approx(20 * 32)


def test_loss_curve_and_time_to_target() -> None:
    curve = loss_curve(progress("worker:0", 10.0, 10, loss0=2.0))
    assert curve[0] == (0.0, 2.0)
    assert time_to_loss(curve, 0.5) == pytest.approx(4.0)  # 2/(1+3)=0.5 reached at t=3; median of 3 at t=4
    assert time_to_loss(curve, 0.01) is None


def test_kill_figures_say_when_the_task_stepped_again() -> None:
    before = progress("worker:1", 10.0, 5)
    after = progress("worker:1", 10.0, 5, start=T0 + 12)
    samples = CellSamples(progress=before + after + progress("worker:0", 10.0, 20),
                          states=[StateSample(T0 + 6, "worker:1", "restarting", None, 1)])
    k = kill_figures(samples, Window(T0, T0 + 20), "worker:1", T0 + 5.5)
    assert k["progress_again_after_s"] == pytest.approx(6.5)
    assert k["restarts"] == 1
    assert k["examples_per_s_before"] == pytest.approx(640.0)
