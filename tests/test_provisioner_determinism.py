"""The provisioner's plan depends on its input and work budget only, never on the clock; the
outer time limit, when it fires, is reported on the plan."""

from __future__ import annotations

from typing import Any

from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner import Plan, PodShape, plan_nodes
from fleetshare.model.catalog import Catalog
from tests.test_provisioner import fake_types


def mixed_batch() -> tuple[list[PodShape], list[NodePool], Catalog, list[Offering]]:
    """20 deployments of 20-40 pods over 30 types in three zones, a fifth each of generic,
    zone spread, one per node and one zone (Karpenter's benchmark mix, medium size)."""
    catalog = fake_types(30)
    offers = [
        Offering(t.name, z, "on-demand", t.price_per_hour or 0) for t in catalog for z in "abc"
    ]
    shapes = []
    for k in range(20):
        cpu, mem = (100, 250, 500, 1000, 1500)[k % 5], (100, 256, 512, 1024, 2048, 4096)[k % 6]
        kind = (k * 7) % 5
        shapes.append(
            PodShape(
                (("cpu", cpu), ("memory", mem * 2**20 * 1000)),
                20 + (k * 13) % 21,
                zone_spread=kind == 1,
                max_per_node=1 if kind in (2, 3) else None,
                same_zone=kind == 4,
            )
        )
    return shapes, [NodePool(name="fake", families=["fake"])], catalog, offers


def decision(plan: Plan) -> dict[str, Any]:
    """Everything a caller acts on (timings left out)."""
    return {
        "nodes": plan.nodes,
        "launches": plan.launches,
        "cost": plan.hourly_cost,
        "bound": plan.lower_bound,
        "method": plan.method,
        "unplaceable": plan.unplaceable,
        "work": {k: v for k, v in plan.stats.items() if not k.endswith("_s")},
    }


def test_the_same_input_gives_the_same_plan() -> None:
    shapes, pools, catalog, offers = mixed_batch()
    # target_gap=0: column generation, the MILP and local search all run; the safety net is
    # far off (about 2.5 CPU seconds, but a loaded 2-core machine stretches that past 10 s)
    first = plan_nodes(shapes, pools, catalog, offers, target_gap=0.0, time_limit=120)
    second = plan_nodes(shapes, pools, catalog, offers, target_gap=0.0, time_limit=120)
    assert first.stats["rounds"] > 0 and first.stats["search_moves"] > 0
    assert not first.time_limit_hit and not second.time_limit_hit and not first.unplaceable
    assert decision(first) == decision(second)


def test_the_plan_does_not_depend_on_the_time_limit() -> None:
    shapes, pools, catalog, offers = mixed_batch()
    short = plan_nodes(shapes, pools, catalog, offers, target_gap=0.0, time_limit=20)
    long = plan_nodes(shapes, pools, catalog, offers, target_gap=0.0, time_limit=120)
    assert not short.time_limit_hit and not long.time_limit_hit
    assert decision(short) == decision(long)


def test_a_time_limit_that_fires_is_reported_and_the_plan_still_holds_every_pod() -> None:
    shapes, pools, catalog, offers = mixed_batch()
    plan = plan_nodes(shapes, pools, catalog, offers, target_gap=0.0, time_limit=1e-6)
    assert plan.time_limit_hit
    assert "time limit" in plan.method
    # cut short after the greedy plan: no search, but every pod is still planned on a node
    assert plan.stats["search_moves"] == 0 and plan.stats["rounds"] == 0
    assert not plan.unplaceable
    planned = [0] * len(shapes)
    for node in plan.nodes:
        for s, k in node.pods:
            planned[s] += k
    assert planned == [s.count for s in shapes]
