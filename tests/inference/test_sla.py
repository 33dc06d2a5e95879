"""SLA metrics on hand-built traffic and serving curves."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import cast

import pytest

from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.inference.service import Service
from fleetshare.inference.traffic import Traffic
from fleetshare.model.catalog import load_catalog
from fleetshare.model.resources import GPU, parse_resources
from fleetshare.simulate.service_compare import OptionResult, cheapest_replica_hour, versus_reactive
from fleetshare.simulate.sla import gpu_hours, measure, serving_steps, time_to_capacity


def _needed(rate: float) -> int:
    return math.ceil(rate / 10 - 1e-9)


def test_capacity_short_minutes_and_requests_on_a_step() -> None:
    # 20 rps for 10 min, then 50 rps for 10 min; replicas of 10 rps: 2 serve throughout,
    # 3 more serve from 12 min (2 min late)
    traffic = Traffic((0.0, 600.0), (20.0, 50.0), 1200.0)
    serving = serving_steps([(0, 1200)] * 2 + [(720, 1200)] * 3)
    sla = measure(traffic, serving, 10.0, _needed, 0.0, 1200.0)
    assert sla.capacity_short_minutes == pytest.approx(2.0)
    assert sla.requests == pytest.approx(20 * 600 + 50 * 600)
    assert sla.requests_in_capacity_short == pytest.approx(50 * 120)
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
    assert sla.capacity_short_minutes == 0
    assert sla.steps == 0


def test_capacity_equal_to_traffic_is_no_violation() -> None:
    traffic = Traffic((0.0,), (30.0,), 600.0)
    sla = measure(traffic, serving_steps([(0, 600)] * 3), 10.0, _needed, 0.0, 600.0)
    assert sla.capacity_short_minutes == 0
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


def _results(option: str, minutes: tuple[float, float], gpu_hours: float) -> OptionResult:
    services = {
        name: {"capacity_short_minutes": m} for name, m in zip(("a", "b"), minutes, strict=True)
    }
    return OptionResult(option, services, {"gpu_hours": gpu_hours}, {})


def test_versus_reactive_sums_services_and_compares_gpu_hours() -> None:
    # reactive: 5 + 3 = 8 capacity-short minutes on 100 GPU-h; headroom: 1.5 + 0.5 = 2 minutes,
    # 8 / 2 = 4x fewer, on 110 GPU-h: +10 GPU-h, +10 %; all: no violation (no ratio), 125 GPU-h
    out = versus_reactive(
        [
            _results("reactive", (5.0, 3.0), 100.0),
            _results("headroom", (1.5, 0.5), 110.0),
            _results("all", (0.0, 0.0), 125.0),
        ]
    )
    assert out["reactive"] == {
        "capacity_short_minutes": 8.0,
        "fewer_capacity_short_minutes_x": 1.0,
        "extra_gpu_hours": 0.0,
        "extra_gpu_hours_percent": 0.0,
    }
    assert out["headroom"]["capacity_short_minutes"] == 2.0
    assert out["headroom"]["fewer_capacity_short_minutes_x"] == 4.0
    assert (out["headroom"]["extra_gpu_hours"], out["headroom"]["extra_gpu_hours_percent"]) == (
        10.0,
        10.0,
    )
    assert out["all"]["fewer_capacity_short_minutes_x"] is None
    assert out["all"]["extra_gpu_hours_percent"] == 25.0
    assert versus_reactive([_results("headroom", (1.0, 0.0), 1.0)]) == {}  # no baseline


def test_perfect_foresight_price_is_the_cheapest_replica_hour_that_fits() -> None:
    """A replica of 1 GPU, 3 CPUs, 12Gi: g5.xlarge (1 GPU, 3.92 CPUs, 13.8Gi allocatable,
    $1.006/h) holds one, $1.006 per replica-hour; g5.12xlarge (4 GPUs, $5.672/h) four, $1.418;
    p4d.24xlarge (8 GPUs, $21.957642/h) eight, $2.7447. With 4 CPUs a g5.xlarge holds none, so
    the g5.12xlarge's $1.418 is the best; a pool of p4d only gives $2.7447."""
    catalog = load_catalog()
    types = ["g5.xlarge", "g5.12xlarge", "p4d.24xlarge"]
    pools = [NodePool(name="gpu", instance_types=types)]

    def replica(cpu: int) -> Service:
        requests = parse_resources({GPU: 1, "cpu": cpu, "memory": "12Gi"})
        return cast(Service, SimpleNamespace(pod=SimpleNamespace(requests=requests)))

    assert cheapest_replica_hour(replica(3), pools, catalog) == pytest.approx(1.006)
    assert cheapest_replica_hour(replica(4), pools, catalog) == pytest.approx(5.672 / 4)
    p4d = [NodePool(name="p4d", instance_types=["p4d.24xlarge"])]
    assert cheapest_replica_hour(replica(3), p4d, catalog) == pytest.approx(21.957642 / 8)
    assert cheapest_replica_hour(replica(200), pools, catalog) is None  # fits nowhere


def test_minutes_above_max_replicas() -> None:
    from fleetshare.inference.traffic import Traffic
    from fleetshare.simulate.sla import above_max_replicas_minutes

    # 10 rps a replica, max 4: 35 rps needs 4 (fits), 45 rps needs 5 for 120 s
    t = Traffic((0.0, 60.0, 180.0), (35.0, 45.0, 20.0), 300.0)
    assert above_max_replicas_minutes(t, 10.0, 4, 0.0, 300.0) == pytest.approx(2.0)
    assert above_max_replicas_minutes(t, 10.0, 4, 120.0, 300.0) == pytest.approx(1.0)


def test_training_in_headroom_in_a_window() -> None:
    from fleetshare.simulate.sla import training_in_headroom

    # one 2-GPU pod: runs 0-700 (preempted: 700 mod 300 = 100 s lost), waits to 1000, runs to
    # the end (3600: nothing lost); window [500, 3600): ran 200 + 2600, waited 300
    done = training_in_headroom([([(0.0, 700.0), (1000.0, 3600.0)], None)], 2, 300, 500, 3600)
    assert done.ran == pytest.approx(2 * 2800 / 3600)
    assert done.lost == pytest.approx(2 * 100 / 3600)
    assert done.delayed == pytest.approx(2 * 300 / 3600)
    # deleted while waiting: the wait ends at the deletion
    gone = training_in_headroom([([(0.0, 700.0)], 900.0)], 1, 300, 0, 3600)
    assert gone.delayed == pytest.approx(200 / 3600)
