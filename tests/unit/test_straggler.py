"""The straggler switch's pure parts: which task is slowed, and how long the in-graph and mirrored sleeps last."""

from __future__ import annotations

import pytest

from training.cluster.straggler import BaselinePacer, DelayPacer, slowdown_factor


def test_slowdown_factor_reads_job_index_keys() -> None:
    slowdown = {"worker:1": 4.0}
    assert slowdown_factor(slowdown, "worker", 1) == 4.0
    assert slowdown_factor(slowdown, "worker", 0) == 1.0
    assert slowdown_factor({}, "chief", 0) == 1.0


def test_pacer_sleeps_factor_minus_one_times_the_undelayed_step() -> None:
    pacer = DelayPacer(warmup_steps=2, window=5)
    assert pacer.delay_s(4.0) == 0.0  # nothing measured yet
    pacer.observe(1.0, 0.0)  # warm-up steps are ignored
    pacer.observe(1.0, 0.0)
    pacer.observe(0.010, 0.0)
    assert abs(pacer.delay_s(4.0) - 0.030) < 1e-9
    # a delayed step: the wall time minus the injected delay is the undelayed step again
    pacer.observe(0.040, 0.030)
    assert abs(pacer.delay_s(4.0) - 0.030) < 1e-9
    assert pacer.delay_s(1.0) == 0.0


def test_pacer_ignores_a_heavy_tail_and_does_not_snowball() -> None:
    pacer = DelayPacer(warmup_steps=0, window=25)
    for i in range(100):
        wall = 0.5 if i % 10 == 0 else 0.010  # one step in ten hiccups
        pacer.observe(wall + pacer.delay_s(4.0), pacer.delay_s(4.0))
    assert abs(pacer.delay_s(4.0) - 0.030) < 1e-9


def test_two_slowed_towers_sleep_in_parallel_without_runaway() -> None:
    """worker:0 at 2x and worker:1 at 8x: the step lasts base + the longest sleep, not their sum."""
    pacer = DelayPacer(warmup_steps=0, window=25)
    base = 0.010
    for _ in range(50):
        delays = [pacer.delay_s(2.0), pacer.delay_s(8.0)]
        pacer.observe(base + max(delays), max(delays))
    assert abs(pacer.delay_s(2.0) - 0.010) < 1e-9
    assert abs(pacer.delay_s(8.0) - 0.070) < 1e-9


def test_baseline_pacer_measures_once_then_sleeps_a_fixed_multiple() -> None:
    pacer = BaselinePacer(4.0, calibration_steps=3)
    assert pacer.delay_s(9.0) == 0.0  # the first step traces the graph: neither paced nor measured
    assert [pacer.delay_s(s) for s in (0.02, 0.01, 0.03)] == [0.0, 0.0, pytest.approx(3 * 0.02)]
    assert pacer.base_s == 0.02


def test_two_paced_workers_of_one_synchronous_group_do_not_feed_each_others_delay() -> None:
    """Each worker's step holds its peer's sleep (the all-reduce waits for it): paced on its own step time, the
    two delays grew threefold a step; on a baseline measured unpaced, they stay put."""
    a, b = BaselinePacer(4.0, calibration_steps=3), BaselinePacer(4.0, calibration_steps=3)
    compute, sleep_a, sleep_b = 0.01, 0.0, 0.0
    delays = []
    for _ in range(30):
        step = compute + max(sleep_a, sleep_b)  # the all-reduce waits for the peer still sleeping
        sleep_a, sleep_b = a.delay_s(step), b.delay_s(step)
        delays.append(sleep_a)
    assert max(delays) == pytest.approx(3 * compute)
