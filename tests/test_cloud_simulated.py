"""The simulated cloud: seeded prices, ICE and cooldowns, capacity limits, interruptions, cost."""

from __future__ import annotations

import math
from typing import Any

import pytest

from fleetshare.autoscaling.cloud import (
    CapacityType,
    CloudError,
    CloudProvider,
    InsufficientCapacityError,
    LaunchRequest,
    Offering,
)
from fleetshare.autoscaling.simulated_cloud import (
    Reservation,
    SimulatedCloud,
    SimulatedCloudConfig,
    seeded_uniform,
)
from fleetshare.model.catalog import load_catalog

P4D = "p4d.24xlarge"
G5 = "g5.8xlarge"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


def request(
    count: int = 1,
    capacity_type: CapacityType = "on-demand",
    instance_type: str = P4D,
    zone: str = "us-east-1a",
) -> LaunchRequest:
    return LaunchRequest(instance_type, zone, capacity_type, count, pool="gpu")


def cloud(**options: Any) -> SimulatedCloud:
    return SimulatedCloud(SimulatedCloudConfig(**options))


def by_key(offerings: list[Offering]) -> dict[tuple[str, str, str], Offering]:
    return {(o.instance_type, o.zone, o.capacity_type): o for o in offerings}


def test_it_is_a_cloud_provider() -> None:
    provider: CloudProvider = SimulatedCloud()
    assert provider.instances() == []


def test_seeded_uniform_is_stable_and_in_range() -> None:
    assert seeded_uniform(7, "a", 1) == seeded_uniform(7, "a", 1)
    assert seeded_uniform(7, "a", 1) != seeded_uniform(8, "a", 1)
    values = [seeded_uniform(0, "x", i) for i in range(2000)]
    assert all(0.0 <= v < 1.0 for v in values)
    assert 0.45 < sum(values) / len(values) < 0.55


def test_spot_is_cheaper_stable_and_seeded() -> None:
    od = load_catalog().get(P4D).price_per_hour
    assert od is not None
    a, b, other = cloud(seed=1), cloud(seed=1), cloud(seed=2)
    for zone in ZONES:
        price = a.spot_price(P4D, zone)
        assert price is not None
        assert od * 0.25 <= price <= od * 0.45  # 55-75 % off
        assert price == a.spot_price(P4D, zone) == b.spot_price(P4D, zone)
        assert a.spot_price("ml." + P4D, zone) == price  # ml. names price like EC2 names
    assert [a.spot_price(P4D, z) for z in ZONES] != [other.spot_price(P4D, z) for z in ZONES]
    assert len({a.spot_price(P4D, z) for z in ZONES}) == 3  # zones differ
    assert a.spot_price(P4D, "us-east-1a", at=86400.0 * 3) == a.spot_price(P4D, "us-east-1a")


def test_spot_drift_is_slow_bounded_and_below_on_demand() -> None:
    od = load_catalog().get(G5).price_per_hour
    assert od is not None
    sim = cloud(seed=3, spot_daily_drift=0.1)
    base = cloud(seed=3).spot_price(G5, "us-east-1b")
    assert base is not None
    prices = [sim.spot_price(G5, "us-east-1b", at=h * 3600.0) for h in range(48)]
    assert all(p is not None and base * 0.9 - 1e-9 <= p <= min(od, base * 1.1) for p in prices)
    assert len(set(prices)) > 10
    assert prices[0] == prices[24]  # daily period


def test_offerings_list_zones_and_capacity_types() -> None:
    sim = cloud(seed=5, reservations={(G5, "us-east-1c"): Reservation(2, 0.5)})
    offers = by_key(sim.offerings([P4D, G5]))
    assert len(offers) == 2 * 3 * 2 + 1
    od = load_catalog().get(P4D).price_per_hour
    assert od is not None
    for zone in ZONES:
        assert offers[(P4D, zone, "on-demand")].price_per_hour == od
        assert offers[(P4D, zone, "spot")].price_per_hour == sim.spot_price(P4D, zone)
        assert offers[(P4D, zone, "spot")].price_per_hour < od
    assert offers[(G5, "us-east-1c", "reserved")].price_per_hour == 0.5
    assert all(o.available for o in offers.values())


def test_launch_returns_pending_instances_that_become_ready() -> None:
    sim = cloud(launch_latency_seconds=600)
    launched = sim.launch(request(count=2), now=100.0)
    assert [i.id for i in launched] == ["i-sim-000001", "i-sim-000002"]
    assert all(i.ready_at == 700.0 and i.state == "pending" for i in launched)
    assert all(i.launched_at == 100.0 and i.pool == "gpu" for i in launched)
    assert [i.state for i in sim.instances(now=699.0)] == ["pending", "pending"]
    assert [i.state for i in sim.instances(now=700.0)] == ["running", "running"]
    assert sim.launch(request(), now=200.0)[0].id == "i-sim-000003"


def test_launch_jitter_is_seeded() -> None:
    a = cloud(seed=9, launch_latency_jitter_seconds=30).launch(request(), now=0.0)
    b = cloud(seed=9, launch_latency_jitter_seconds=30).launch(request(), now=0.0)
    assert a == b
    assert a[0].ready_at is not None and 90.0 <= a[0].ready_at < 120.0


def test_bad_launches_and_terminations() -> None:
    sim = SimulatedCloud()
    with pytest.raises(CloudError, match="unknown zone"):
        sim.launch(request(zone="eu-west-1a"), now=0.0)
    with pytest.raises(CloudError, match="positive"):
        sim.launch(request(count=0), now=0.0)
    (instance,) = sim.launch(request(), now=0.0)
    with pytest.raises(CloudError, match="i-nope"):
        sim.terminate([instance.id, "i-nope"], now=1.0)
    assert sim.instances() != []  # nothing terminated on error
    sim.terminate([instance.id], now=2.0)
    sim.terminate([instance.id], now=3.0)  # idempotent
    assert sim.instances() == []


def test_ice_marks_offering_unavailable_for_the_cooldown() -> None:
    sim = cloud(capacity_limits={(P4D, "us-east-1a", "on-demand"): 0})
    with pytest.raises(InsufficientCapacityError) as caught:
        sim.launch(request(), now=1000.0)
    assert (caught.value.instance_type, caught.value.zone) == (P4D, "us-east-1a")
    assert caught.value.capacity_type == "on-demand"
    assert "p4d.24xlarge" in str(caught.value) and "us-east-1a" in str(caught.value)

    def available(now: float) -> dict[tuple[str, str, str], bool]:
        return {k: o.available for k, o in by_key(sim.offerings([P4D], now=now)).items()}

    during = available(1179.0)
    assert not during[(P4D, "us-east-1a", "on-demand")]
    assert sum(during.values()) == 5  # spot and other zones unaffected
    assert all(available(1180.0).values())


def test_ice_cooldown_is_configurable_and_uses_the_last_known_time() -> None:
    sim = cloud(capacity_limits={(G5, "us-east-1b", "spot"): 0}, ice_cooldown_seconds=60)
    with pytest.raises(InsufficientCapacityError):
        sim.launch(request(instance_type=G5, zone="us-east-1b", capacity_type="spot"), now=10.0)
    key = (G5, "us-east-1b", "spot")
    assert not by_key(sim.offerings([G5]))[key].available  # clock = 10
    assert by_key(sim.offerings([G5], now=70.0))[key].available


def test_ice_probability_is_reproducible_per_seed() -> None:
    def outcomes(seed: int) -> list[bool]:
        sim = cloud(seed=seed, ice_probability=0.5)
        result = []
        for n in range(40):
            try:
                sim.launch(request(), now=float(n))
                result.append(True)
            except InsufficientCapacityError:
                result.append(False)
        return result

    first = outcomes(11)
    assert first == outcomes(11)
    assert first != outcomes(12)
    assert 5 < sum(first) < 35
    with pytest.raises(InsufficientCapacityError):
        cloud(ice_probability=1.0).launch(request(), now=0.0)


def test_capacity_limits_give_partial_launches() -> None:
    sim = cloud(capacity_limits={("ml." + P4D, "us-east-1a", "on-demand"): 3})
    launched = sim.launch(request(count=5), now=0.0)
    assert len(launched) == 3
    assert not by_key(sim.offerings([P4D], now=0.0))[(P4D, "us-east-1a", "on-demand")].available
    with pytest.raises(InsufficientCapacityError):
        sim.launch(request(), now=1.0)
    assert len(sim.launch(request(zone="us-east-1b", count=5), now=1.0)) == 5  # other zone
    sim.terminate([launched[0].id], now=2.0)
    assert len(sim.launch(request(count=2), now=3.0)) == 1


def test_reserved_capacity() -> None:
    sim = cloud(reservations={(P4D, "us-east-1a"): Reservation(2)})
    launched = sim.launch(request(count=3, capacity_type="reserved"), now=0.0)
    assert len(launched) == 2
    assert all(i.capacity_type == "reserved" and i.price_per_hour == 0.0 for i in launched)
    assert not by_key(sim.offerings([P4D]))[(P4D, "us-east-1a", "reserved")].available
    with pytest.raises(InsufficientCapacityError):
        sim.launch(request(capacity_type="reserved"), now=1.0)
    with pytest.raises(InsufficientCapacityError):  # no reservation in that zone
        sim.launch(request(capacity_type="reserved", zone="us-east-1b"), now=1.0)
    sim.terminate([launched[0].id], now=200.0)
    assert by_key(sim.offerings([P4D]))[(P4D, "us-east-1a", "reserved")].available
    assert sim.cost(until=3600.0) == 0.0


def test_interruptions_are_seeded_exponential_and_replayable() -> None:
    def spot_cloud(seed: int) -> SimulatedCloud:
        sim = cloud(seed=seed, spot_interruption_rate_per_hour=1.0)
        sim.launch(request(count=200, capacity_type="spot", instance_type=G5), now=100.0)
        sim.launch(request(count=5), now=100.0)  # on-demand: never interrupted
        return sim

    a = spot_cloud(21)
    events = a.interruptions(until=math.inf)
    assert events == spot_cloud(21).interruptions(until=math.inf)
    assert events != spot_cloud(22).interruptions(until=math.inf)
    assert len(events) == 200 and events == sorted(events)
    mean_hours = sum(t - 100.0 for t, _ in events) / len(events) / 3600.0
    assert 0.75 < mean_hours < 1.3  # rate 1/h -> mean 1 h
    early = a.interruptions(until=3700.0)
    assert early == [e for e in events if e[0] <= 3700.0]
    when, victim = early[0]
    a.terminate([victim], now=when)  # the simulator replays the interruption
    assert victim not in {i for _, i in a.interruptions(until=math.inf)}
    assert cloud().interruptions(until=math.inf) == []


def test_an_adopted_instance_is_live_with_its_interruption_and_ids_move_on() -> None:
    """A restarted service gives its instances back to a new cloud of the same seed: live,
    interrupted when they would have been, and new launches never reuse their ids."""
    first = cloud(seed=5, spot_interruption_rate_per_hour=1.0)
    launched = first.launch(request(count=3, capacity_type="spot", instance_type=G5), 10.0)
    kept = launched[2]
    second = cloud(seed=5, spot_interruption_rate_per_hour=1.0)
    second.adopt(kept)
    assert [i.id for i in second.instances(now=1e9)] == [kept.id]
    assert second.interruption_at(kept.id) == first.interruption_at(kept.id)
    new = second.launch(request(), 20.0)
    assert new[0].id not in {i.id for i in launched}
    with pytest.raises(CloudError, match="exists already"):
        second.adopt(kept)


def test_cost_matches_a_hand_computation() -> None:
    od = load_catalog().get(P4D).price_per_hour
    assert od is not None
    sim = cloud(seed=4)
    first, _ = sim.launch(request(count=2), now=0.0)
    spot = sim.launch(request(capacity_type="spot", zone="us-east-1c"), now=1800.0)[0]
    short = sim.launch(request(), now=100.0)[0]
    sim.terminate([first.id], now=1800.0)
    sim.terminate([short.id], now=110.0)  # 10 s, billed the 60 s minimum
    spot_price = sim.spot_price(P4D, "us-east-1c", at=1800.0)
    assert spot_price is not None and spot.price_per_hour == spot_price
    expected = od * 0.5 + od * 1.0 + spot_price * 0.5 + od * 60 / 3600
    assert sim.cost(until=3600.0) == pytest.approx(expected)
    assert sim.cost(until=0.0) == 0.0
    assert sim.cost(until=900.0) == pytest.approx(od * 0.25 * 2 + od * 60 / 3600)


def test_cost_stops_at_a_spot_interruption() -> None:
    sim = cloud(seed=8, spot_interruption_rate_per_hour=2.0)
    (instance,) = sim.launch(request(capacity_type="spot"), now=0.0)
    ((when, _),) = sim.interruptions(until=math.inf)
    until = when + 7200.0
    billed = max(when, 60.0)
    assert sim.cost(until) == pytest.approx(instance.price_per_hour * billed / 3600)


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="zone"):
        SimulatedCloudConfig(zones=())
    with pytest.raises(ValueError, match="spot discounts"):
        SimulatedCloudConfig(spot_discount_min=0.8, spot_discount_max=0.7)
    with pytest.raises(ValueError, match="ice_probability"):
        SimulatedCloudConfig(ice_probability=1.5)
    with pytest.raises(ValueError, match="launch_latency_seconds"):
        SimulatedCloudConfig(launch_latency_seconds=-1)


def test_account_limits_cut_launches_short_then_refuse_them_like_ec2() -> None:
    from fleetshare.autoscaling.cloud import AccountLimitError
    from fleetshare.autoscaling.settings import CloudSpec

    catalog = load_catalog()
    spec = CloudSpec.model_validate(
        {"service_quotas": [{"group": "G", "max_vcpus": 80}], "instance_limits": {P4D: 1}}
    )
    sim = SimulatedCloud(spec.config(catalog))
    # g5.8xlarge has 32 vCPUs: two fit in 80, the third is refused
    assert len(sim.launch(request(3, instance_type=G5), 0.0)) == 2
    with pytest.raises(AccountLimitError, match=r"VcpuLimitExceeded.*limit of 80"):
        sim.launch(request(1, instance_type=G5, zone="us-east-1b"), 1.0)
    # the refusal is not a capacity shortage: the offering stays available
    assert all(o.available for o in sim.offerings([G5], 2.0))
    # spot has its own quota (none here); a per-type limit applies to every capacity type
    assert len(sim.launch(request(1, "spot", G5), 2.0)) == 1
    assert len(sim.launch(request(2, "spot", P4D), 2.0)) == 1
    with pytest.raises(AccountLimitError, match="InstanceLimitExceeded"):
        sim.launch(request(1, "on-demand", P4D), 3.0)
    # terminating frees the quota
    g5 = [i.id for i in sim.instances(4.0) if i.instance_type == G5 and i.capacity_type != "spot"]
    sim.terminate(g5[:1], 4.0)
    assert len(sim.launch(request(1, instance_type=G5), 5.0)) == 1


def test_account_limits_are_validated_with_the_field_named() -> None:
    from pydantic import ValidationError

    from fleetshare.autoscaling.settings import CloudSpec

    with pytest.raises(ValidationError, match="unknown AWS quota group 'Q'"):
        CloudSpec.model_validate({"service_quotas": [{"group": "Q", "max_vcpus": 8}]})
    with pytest.raises(ValidationError, match="exactly one of 'group'"):
        CloudSpec.model_validate({"service_quotas": [{"max_vcpus": 8}]})
    with pytest.raises(ValueError, match=r"instance_limits: unknown instance types nope\.large"):
        CloudSpec.model_validate({"instance_limits": {"nope.large": 1}}).config(load_catalog())
