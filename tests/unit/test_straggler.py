"""The straggler switch's pure parts: which task is slowed, and how long the in-graph sleep lasts."""

from __future__ import annotations

from training.straggler import DelayPacer, slowdown_factor


def test_slowdown_factor_reads_job_index_keys() -> None:
    slowdown = {"worker:1": 4.0}
    assert slowdown_factor(slowdown, "worker", 1) == 4.0
    assert slowdown_factor(slowdown, "worker", 0) == 1.0
    assert slowdown_factor({}, "chief", 0) == 1.0


def test_pacer_sleeps_factor_minus_one_times_the_undelayed_step() -> None:
    pacer = DelayPacer(4.0, warmup_steps=2, window=5)
    assert pacer.next_delay_s() == 0.0  # nothing measured yet
    pacer.observe(1.0, 0.0)  # warm-up steps are ignored
    pacer.observe(1.0, 0.0)
    pacer.observe(0.010, 0.0)
    assert abs(pacer.next_delay_s() - 0.030) < 1e-9
    # a delayed step: the wall time minus the injected delay is the undelayed step again
    pacer.observe(0.040, 0.030)
    assert abs(pacer.next_delay_s() - 0.030) < 1e-9


def test_pacer_ignores_a_heavy_tail_and_does_not_snowball() -> None:
    pacer = DelayPacer(4.0, warmup_steps=0, window=25)
    for i in range(100):
        wall = 0.5 if i % 10 == 0 else 0.010  # one step in ten hiccups
        pacer.observe(wall + pacer.next_delay_s(), pacer.next_delay_s())
    assert abs(pacer.next_delay_s() - 0.030) < 1e-9


def test_no_delay_without_slowdown() -> None:
    pacer = DelayPacer(1.0, warmup_steps=0)
    pacer.observe(0.01, 0.0)
    assert pacer.next_delay_s() == 0.0
