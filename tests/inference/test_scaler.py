"""The scaler's rules on hand-built series (HPA and KEDA as documented)."""

from __future__ import annotations

from fleetshare.inference.scaler import Reading, ScalerState, decide
from fleetshare.inference.spec import Behavior, ScalerSpec, ScalingPolicy, ScalingRules, Trigger


def _spec(**kw: object) -> ScalerSpec:
    data: dict[str, object] = {"triggers": [Trigger(metric="rps", target=10)], "max_replicas": 100}
    data.update(kw)
    return ScalerSpec.model_validate(data)


def _run(spec: ScalerSpec, series: list[tuple[float, float]], start: int) -> list[int]:
    """Replicas after each (time, total rps) reading, starting from ``start`` replicas."""
    state = ScalerState(replicas=start)
    out = []
    for t, value in series:
        trigger = spec.triggers[0]
        d = decide(spec, state, t, [Reading(value, trigger.target, trigger.activation)])
        state = d.state
        out.append(d.replicas)
    return out


def _every(step: float, values: list[float]) -> list[tuple[float, float]]:
    return [(i * step, v) for i, v in enumerate(values)]


def test_proposal_is_ceil_of_metric_over_target_outside_tolerance() -> None:
    spec = _spec()
    assert _run(spec, [(0, 104)], start=10) == [10]  # ratio 1.04: within 0.1
    assert _run(spec, [(0, 111)], start=10) == [12]  # ratio 1.11: ceil(11.1)
    assert _run(spec, [(0, 90)], start=10) == [10]  # ratio 0.9: within (no window yet)


def test_scale_down_follows_the_highest_proposal_of_the_last_300_s() -> None:
    spec = _spec()
    # demand for 10 replicas, then 2 from t=15 on: held at 10 until t=0's proposal leaves
    series = _every(15, [100] + [20] * 25)
    replicas = _run(spec, series, start=10)
    # proposals older than 300 s (strictly) drop out: at t=300 the t=0 proposal is gone
    assert replicas[: 300 // 15] == [10] * 20
    assert replicas[300 // 15] == 2


def test_scale_up_is_immediate_but_rate_limited() -> None:
    spec = _spec()
    # 4 -> wants 50: default policies allow max(4 + 4, 4 * 2) = 8 per 15 s
    replicas = _run(spec, _every(15, [500] * 5), start=4)
    assert replicas == [8, 16, 32, 50, 50]


def test_rate_limit_counts_changes_within_the_period() -> None:
    rules = ScalingRules(
        stabilization_window_seconds=0,
        policies=[ScalingPolicy(type="Pods", value=2, period_seconds=60)],
    )
    spec = _spec(behavior=Behavior(scale_up=rules))
    # every 15 s: +2 at t=0, then nothing until the t=0 change is 60 s old (t=60 excluded)
    replicas = _run(spec, _every(15, [500] * 6), start=1)
    assert replicas == [3, 3, 3, 3, 5, 5]


def test_select_policy_min_takes_the_least_permissive() -> None:
    rules = ScalingRules(
        stabilization_window_seconds=0,
        policies=[
            ScalingPolicy(type="Pods", value=4, period_seconds=15),
            ScalingPolicy(type="Percent", value=100, period_seconds=15),
        ],
        select_policy="Min",
    )
    spec = _spec(behavior=Behavior(scale_up=rules))
    assert _run(spec, _every(15, [500] * 3), start=10) == [14, 18, 22]


def test_disabled_scale_down_never_removes() -> None:
    rules = ScalingRules(stabilization_window_seconds=0, policies=[], select_policy="Disabled")
    spec = _spec(behavior=Behavior(scale_down=rules))
    assert _run(spec, _every(15, [10] * 4), start=6) == [6, 6, 6, 6]


def test_scale_up_window_holds_until_demand_lasts() -> None:
    rules = ScalingRules(
        stabilization_window_seconds=60,
        policies=[ScalingPolicy(type="Percent", value=1000, period_seconds=15)],
    )
    spec = _spec(behavior=Behavior(scale_up=rules))
    # a burst of one reading does not scale up; a lasting one does once the window is past it
    replicas = _run(spec, _every(15, [20, 80, 20, 80, 80, 80, 80, 80]), start=2)
    assert replicas[:6] == [2, 2, 2, 2, 2, 2]
    assert replicas[7] == 8  # t=105: the last low proposal (t=30) is more than 60 s old


def test_scale_to_zero_after_cooldown_and_back() -> None:
    spec = _spec(triggers=[Trigger(metric="rps", target=10, activation=1)], cooldown_seconds=120)
    # active until t=30, then traffic at or below the activation threshold
    series = _every(30, [30, 30, 1, 0.5, 0, 0, 0, 5, 5])
    replicas = _run(spec, series, start=3)
    assert replicas[:2] == [3, 3]
    assert replicas[2:5] == [3, 3, 3]  # inactive from t=60; the cooldown counts from t=30
    assert replicas[5] == 0  # t=150: 120 s after the last active reading
    assert replicas[6] == 0
    assert replicas[7] == 1  # active again: from zero to max(min_replicas, 1)


def test_below_activation_with_replicas_the_hpa_still_scales() -> None:
    # the HPA keeps acting between one replica and the maximum while KEDA is inactive
    spec = _spec(triggers=[Trigger(metric="rps", target=1, activation=5)], min_replicas=1)
    assert _run(spec, [(0, 4)], start=1) == [4]


def test_min_replicas_floor_and_max_clamp() -> None:
    spec = _spec(min_replicas=2, max_replicas=5)
    assert _run(spec, [(0, 0)], start=0) == [2]
    assert _run(spec, [(0, 1000)], start=4) == [5]
    assert _run(spec, [(0, 0)], start=9) == [5]


def test_several_triggers_take_the_largest_proposal() -> None:
    spec = _spec()
    state = ScalerState(replicas=2)
    d = decide(spec, state, 0, [Reading(20, 10), Reading(60, 10), Reading(0, 1)])
    assert d.replicas == 6


def test_idle_replica_count_goes_below_min_replicas_when_inactive() -> None:
    # KEDA's idleReplicaCount 0 with minReplicaCount 2: inactive for the cooldown -> 0;
    # active again -> min_replicas at once
    spec = _spec(min_replicas=2, idle_replicas=0, cooldown_seconds=60)
    # last active at 0: the cooldown of 60 s is over at 60
    assert _run(spec, _every(30, [15, 0, 0, 0, 5]), start=2) == [2, 2, 0, 0, 2]
    # without it the HPA keeps min_replicas
    assert _run(_spec(min_replicas=2, cooldown_seconds=60), _every(30, [15, 0, 0, 0]), 2) == [
        2,
        2,
        2,
        2,
    ]


def test_fallback_after_the_failure_threshold() -> None:
    from fleetshare.inference.scaler import fallback

    spec = _spec(fallback={"failure_threshold": 3, "replicas": 6})
    state = ScalerState(replicas=2)
    assert fallback(spec, state, 0.0, 2) is None  # not yet: the replicas stay
    d = fallback(spec, state, 0.0, 3)
    assert d is not None and d.replicas == 6
    higher = _spec(
        fallback={"failure_threshold": 1, "replicas": 6, "behavior": "currentReplicasIfHigher"}
    )
    got = fallback(higher, ScalerState(replicas=9), 0.0, 1)
    assert got is not None and got.replicas == 9
    assert fallback(_spec(), state, 0.0, 99) is None  # no fallback configured


def test_max_replicas_below_the_traffic_says_so() -> None:
    spec = _spec(max_replicas=5)
    d = decide(spec, ScalerState(replicas=3), 0.0, [Reading(120, 10)])
    assert d.replicas == 5
    assert d.why.startswith("MaxReplicasBelowTraffic: max_replicas 5, the traffic needs 12")


class _Failing:
    """A metric source whose reads fail while ``down``."""

    def __init__(self) -> None:
        self.down = False

    def read(self) -> float:
        from fleetshare.inference.prometheus import MetricError

        if self.down:
            raise MetricError("unreachable")
        return 20.0


def test_a_live_scaler_falls_back_after_failed_reads_in_a_row() -> None:
    import pytest

    from fleetshare.inference.live import LiveScaler
    from fleetshare.inference.prometheus import MetricError

    source = _Failing()
    live = LiveScaler(_spec(fallback={"failure_threshold": 2, "replicas": 7}), [source])
    assert live.tick(0.0).replicas == 1  # activated from zero
    source.down = True
    with pytest.raises(MetricError):
        live.tick(15.0)  # first failure: KEDA keeps the replicas
    assert live.tick(30.0).replicas == 7  # second in a row: the fallback
    source.down = False
    assert live.tick(45.0).replicas == 7  # 20 rps at 10 a replica: scale-down is stabilised
    assert live.failures == 0


def test_cron_floors_keep_their_time_zone() -> None:
    from datetime import UTC, datetime

    from fleetshare.autoscaling.cron import window_active

    monday = datetime(2026, 1, 5, tzinfo=UTC)  # winter: Paris is UTC+1
    # "0 9 * * 1-5" in Paris opens at 08:00 UTC in January, for an hour
    assert not window_active("0 9 * * 1-5", 3600, 8 * 3600 - 1, monday, "Europe/Paris")
    assert window_active("0 9 * * 1-5", 3600, 8 * 3600 + 1, monday, "Europe/Paris")
    assert not window_active("0 9 * * 1-5", 3600, 9 * 3600 + 1, monday, "Europe/Paris")
    july = datetime(2026, 7, 6, tzinfo=UTC)  # summer: UTC+2, opens at 07:00 UTC
    assert window_active("0 9 * * 1-5", 3600, 7 * 3600 + 1, july, "Europe/Paris")


def test_a_live_scaler_runs_cron_triggers_on_wall_clock_time() -> None:
    from datetime import UTC, datetime

    from fleetshare.inference.live import LiveScaler
    from fleetshare.inference.spec import FloorSpec

    floor = FloorSpec(schedule="0 9 * * *", duration_seconds=3600, min_replicas=5)
    live = LiveScaler(_spec(), [_Failing()], floors=[floor])  # 20 rps: 2 replicas
    nine = datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC).timestamp()
    assert live.tick(nine - 3600).replicas == 1  # from zero: activated
    assert live.tick(nine - 3570).replicas == 2  # the rps trigger alone
    assert live.tick(nine).replicas == 5  # the window is open: at least 5
