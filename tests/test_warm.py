"""Warm capacity ahead of forecast demand, and the under-provisioning it is judged by."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.warm import WarmCapacity, rise, since, warm_pods, warm_target
from fleetshare.simulate.metrics import under_provision
from tests.conftest import run_case

GPU = "nvidia.com/gpu"
HOUR = 3600.0
POLICY: dict[str, Any] = {"teams": [{"name": "research", "quota": [{"resources": {GPU: 16}}]}]}


def test_target_is_the_larger_of_forecast_and_recent_peak_raised_by_the_margin() -> None:
    assert warm_target(10.0, [4.0, 6.0], 0.0) == 10.0
    assert warm_target(10.0, [4.0, 12.0], 0.5) == 18.0
    assert warm_target(-3.0, [], 0.1) == 0.0
    assert warm_pods(10.0, 4.0, 1.0) == 6
    assert warm_pods(10.0, 4.0, 8.0) == 1  # part of a pod counts whole
    assert warm_pods(16.0, 16.0, 8.0) == 0
    assert warm_pods(4.0, 10.0, 1.0) == 0  # demand above the target: nothing warm
    with pytest.raises(ValueError, match="unit"):
        warm_pods(1.0, 0.0, 0.0)
    # a recent burst of 5 on top of the recent peak of 12
    assert warm_target(10.0, [4.0, 12.0], 0.0, 5.0) == 17.0
    assert warm_target(20.0, [4.0, 12.0], 0.0, 5.0) == 20.0


def test_a_rise_is_how_far_demand_climbs_within_the_launch_latency() -> None:
    # demand 10 from t=0, 4 from t=100, 12 from t=150; it becomes 20 at t=200
    changes = [(0.0, 10.0), (100.0, 4.0), (150.0, 12.0)]
    assert rise(changes, 200.0, 20.0, within=90.0) == 16.0  # 4 held at t=110..150
    assert rise(changes, 200.0, 20.0, within=30.0) == 8.0  # only 12 held since t=170
    assert rise(changes, 200.0, 20.0, within=250.0) == 16.0
    assert rise(changes, 200.0, 3.0, within=90.0) == 0.0  # a fall is no rise
    assert rise([], 200.0, 20.0, within=90.0) == 0.0
    # the recent peak's span: the change point in force at its start, and those after
    assert since(changes, 120.0) == [(100.0, 4.0), (150.0, 12.0)]
    assert since(changes, 150.0) == [(150.0, 12.0)]


def test_setting_is_validated_with_the_field_named() -> None:
    with pytest.raises(ValueError, match="history"):
        WarmCapacity(history=[(-10.0, 1.0), (5.0, 2.0)])  # after the run started
    with pytest.raises(ValueError, match="history"):
        WarmCapacity(history=[(-10.0, 1.0), (-20.0, 2.0)])
    with pytest.raises(ValueError, match="horizon_seconds"):
        WarmCapacity(horizon_seconds=0)
    with pytest.raises(ValueError, match="margin"):
        WarmCapacity(margin=-0.1)
    with pytest.raises(ValueError, match="must request some"):
        WarmCapacity(pod={"cpu": 1}).unit()
    with pytest.raises(ValueError, match="warm_capacity"):
        NodePool.model_validate({"name": "gpu", "warm_capacity": {"quantile": 2}})
    assert WarmCapacity().unit() == {GPU: 1000}
    # the horizon: as set, else the launch latency (one forecast step when launches are instant)
    assert WarmCapacity(horizon_seconds=1800).horizon(90.0) == 1800
    assert WarmCapacity().horizon(90.0) == 90.0
    assert WarmCapacity(step_seconds=300).horizon(0.0) == 300


def test_under_provision_events_merge_overlapping_waits() -> None:
    nan = math.nan
    # job:            a     b     c     d (never short)  e (never admitted)  f (touches a+b)
    short = np.array([0.0, 5.0, 20.0, nan, 30.0, 12.0])
    admit = np.array([10.0, 12.0, 25.0, 1.0, nan, 15.0])
    gpus = np.array([1.0, 2.0, 4.0, 8.0, 1.0, 3.0])
    got = under_provision(short, admit, gpus, horizon=40.0)
    assert got.events == 3  # [0, 15] (a, b, f), [20, 25] (c), [30, 40] (e, censored)
    assert got.jobs == 5
    assert got.hours == pytest.approx((1 * 10 + 2 * 7 + 4 * 5 + 1 * 10 + 3 * 3) / HOUR)
    assert got.span_hours == pytest.approx((15 + 5 + 10) / HOUR)
    # admitted the moment it became short: no wait, no event
    none = under_provision(np.array([7.0]), np.array([7.0]), np.array([1.0]), 10.0)
    assert (none.events, none.jobs, none.hours) == (0, 0, 0.0)


def _burst(warm: dict[str, Any] | None) -> dict[str, Any]:
    """Four 1-GPU jobs at 00:10 on a pool of 1-GPU nodes, with ``warm`` capacity."""
    pool: dict[str, Any] = {
        "name": "gpu",
        "instance_types": ["g6.xlarge"],
        "disruption": {"consolidate_after_seconds": 60},
    }
    if warm is not None:
        pool["warm_capacity"] = warm
    jobs = [
        {
            "name": f"j{i}",
            "team": "research",
            "at": 600,
            "requests": {GPU: 1, "cpu": 2, "memory": "8Gi"},
            "duration": 600,
        }
        for i in range(4)
    ]
    return run_case(POLICY, [], jobs, node_pools=[pool], cloud={"seed": 1}, until=2 * HOUR)


def daily_burst(hour: int, days: int = 3) -> list[tuple[float, float]]:
    """Demand history of ``days`` days before t=0 (midnight): 4 GPUs from ``hour`` for an
    hour each day, none otherwise."""
    out = []
    for day in range(days, 0, -1):
        start = -day * 24 * HOUR + hour * HOUR
        out += [(start, 4.0), (start + HOUR, 0.0)]
    return out


def test_warm_capacity_launches_ahead_of_the_demand_the_season_forecasts() -> None:
    setting = {"step_seconds": HOUR, "horizon_seconds": HOUR}
    warm = _burst({**setting, "history": daily_burst(0)})
    for i in range(4):
        assert warm["workloads"][f"j{i}"]["admitted_at"] == 600  # no launch to wait for
    early = [n for n in warm["nodes"] if n["launched_at"] == 0]
    assert len(early) == 4  # launched at midnight, before any work, and kept while empty
    assert all(n["terminated_at"] is None or n["terminated_at"] > 600 for n in early)
    first = next(e for e in warm["events"] if e.get("action") == "warm")
    assert first["method"] == "holt-winters" and first["demand"] == 0 and first["pods"] == 4

    # the same history shifted to noon: nothing is expected at midnight, so nothing is warm
    # and the jobs wait for a launch, as with no forecaster at all
    for out in (_burst({**setting, "history": daily_burst(12)}), _burst(None)):
        assert all(n["launched_at"] >= 600 for n in out["nodes"])
        assert all(out["workloads"][f"j{i}"]["admitted_at"] > 600 for i in range(4))


def _bursts(warm: dict[str, Any]) -> dict[str, Any]:
    """4 one-GPU jobs at 00:10 and 4 more at 00:30 (1-GPU nodes, 90 s launches)."""
    pool = {
        "name": "gpu",
        "instance_types": ["g6.xlarge"],
        "disruption": {"consolidate_after_seconds": 60},
        "warm_capacity": {"step_seconds": HOUR, "horizon_seconds": HOUR, **warm},
    }
    jobs = [
        {
            "name": f"{burst}{i}",
            "team": "research",
            "at": at,
            "requests": {GPU: 1, "cpu": 2, "memory": "8Gi"},
            "duration": 2 * HOUR,
        }
        for burst, at in (("a", 600), ("b", 1800))
        for i in range(4)
    ]
    return run_case(POLICY, [], jobs, node_pools=[pool], cloud={"seed": 1}, until=4 * HOUR)


def test_burst_seconds_keeps_room_for_another_rise_like_the_last() -> None:
    # no history: the forecast is the last hour's peak, nothing ahead of the first burst
    plain = _bursts({})
    burst = _bursts({"burst_seconds": HOUR})
    for out in (plain, burst):
        assert all(out["workloads"][f"a{i}"]["admitted_at"] > 600 for i in range(4))
    # the first burst climbed by 4 GPUs: room for 4 more is kept, so the second starts at once
    assert all(burst["workloads"][f"b{i}"]["admitted_at"] == 1800 for i in range(4))
    assert all(plain["workloads"][f"b{i}"]["admitted_at"] > 1800 for i in range(4))
    warm = [e for e in burst["events"] if e.get("action") == "warm"]
    assert warm[0]["demand"] == 4 and warm[0]["target"] == 8 and warm[0]["pods"] == 4
    # the second burst climbed by 4 too: room is kept until an hour after it (01:30), given
    # back at the next step (the forecast sampling step is an hour here)
    back = next(e for e in warm if e["pods"] == 0)
    assert 1800 + HOUR <= back["at"] <= 2 * HOUR


def test_the_history_before_a_trace_window_is_its_jobs_demand() -> None:
    from fleetshare.simulate.run import demand_before

    opts = {"start_day": 59, "days": 1, "resolution_minutes": 10}
    history = demand_before("philly", opts, 1, GPU)
    times = [t for t, _ in history]
    assert times == sorted(times) and times[0] >= -24 * HOUR and times[-1] < 0
    # whole-node jobs of 8 GPUs: the demand is 8 x the active nodes, never above the cluster
    assert all(v % 8 == 0 and 0 <= v <= 8 * 552 for _, v in history)
    assert max(v for _, v in history) > 0
    assert demand_before("philly", {"start_day": 0, "days": 1}, 7, GPU) == []


def test_simulate_warm_capacity_option_is_checked_before_running() -> None:
    from typer.testing import CliRunner

    from fleetshare.cli import app

    runner = CliRunner()
    base = ["simulate", "--trace", "philly", "--days", "0.1", "-p", "static-autoscale"]
    bad = runner.invoke(app, [*base, "--warm-capacity", "{quantile: 2}"])
    assert bad.exit_code == 2 and "quantile" in bad.output
    listed = runner.invoke(app, [*base, "--warm-capacity", "[1, 2]"])
    assert listed.exit_code == 2 and "give a mapping" in listed.output
    scenario = runner.invoke(app, ["simulate", "kueue-reclaim", "--warm-capacity", "{}"])
    assert scenario.exit_code == 2 and "applies to traces" in scenario.output
