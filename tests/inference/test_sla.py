"""SLA metrics on hand-built traffic and serving curves."""

from __future__ import annotations

import math

import pytest

from fleetshare.inference.traffic import Traffic
from fleetshare.simulate.sla import gpu_hours, measure, serving_steps, time_to_capacity


def _needed(rate: float) -> int:
    return math.ceil(rate / 10 - 1e-9)


def test_violation_minutes_and_requests_on_a_step() -> None:
    # 20 rps for 10 min, then 50 rps for 10 min; replicas of 10 rps: 2 serve throughout,
    # 3 more serve from 12 min (2 min late)
    traffic = Traffic((0.0, 600.0), (20.0, 50.0), 1200.0)
    serving = serving_steps([(0, 1200)] * 2 + [(720, 1200)] * 3)
    sla = measure(traffic, serving, 10.0, _needed, 0.0, 1200.0)
    assert sla.violation_minutes == pytest.approx(2.0)
    assert sla.requests == pytest.approx(20 * 600 + 50 * 600)
    assert sla.requests_in_violation == pytest.approx(50 * 120)
    assert sla.requests_over_capacity == pytest.approx((50 - 20) * 120)
    # perfect foresight: 2 replicas for 10 min, 5 for 10 min
    assert sla.needed_replica_hours == pytest.approx((2 * 600 + 5 * 600) / 3600)
    # three demand steps (levels 3, 4, 5) at t=600, all met at t=720
    assert sla.steps == 3
    assert sla.time_to_capacity["p50"] == pytest.approx(120)


def test_the_window_excludes_what_came_before() -> None:
    traffic = Traffic((0.0, 600.0), (50.0, 10.0), 1200.0)
    serving = serving_steps([(300, 1200)])
    sla = measure(traffic, serving, 10.0, _needed, 600.0, 1200.0)
    assert sla.violation_minutes == 0
    assert sla.steps == 0


def test_capacity_equal_to_traffic_is_no_violation() -> None:
    traffic = Traffic((0.0,), (30.0,), 600.0)
    sla = measure(traffic, serving_steps([(0, 600)] * 3), 10.0, _needed, 0.0, 600.0)
    assert sla.violation_minutes == 0
    assert sla.steps == 0 and sla.steps_met == 3  # the rise from 0 was covered at once


def test_a_step_never_met_is_censored_at_the_end() -> None:
    traffic = Traffic((0.0, 100.0), (10.0, 30.0), 400.0)
    serving = serving_steps([(0, 400), (250, 400)])
    waits, met = time_to_capacity(traffic, serving, _needed, 0.0, 400.0)
    # level 1 at t=0 met at once; level 2 at t=100 met at 250; level 3 never (censored)
    assert met == 1
    assert waits == [150.0, 300.0]


def test_serving_steps_count_overlapping_intervals() -> None:
    steps = serving_steps([(0, 10), (5, 20), (10, 15)])
    assert [steps.at(t) for t in (0, 5, 10, 15, 20)] == [1, 2, 2, 1, 0]


def test_gpu_hours_clip_to_the_window() -> None:
    assert gpu_hours([(0, 7200, 4), (3600, 10_800, 1)], 3600, 7200) == pytest.approx(5.0)
