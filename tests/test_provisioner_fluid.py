"""The fluid plan (the fast path for large problems) against the plain path (greedy plans,
local search, column generation): every plan fits its nodes, places every pod, keeps one pod
of a capped deployment per node, and the fluid path is never dearer on the real catalog."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np

from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner import Plan, PlanBudget, PodShape, plan_nodes
from fleetshare.autoscaling.provisioner.bound import resource_prices
from fleetshare.autoscaling.provisioner.budget import SafetyNet
from fleetshare.autoscaling.provisioner.fluid import Solves, fluid_packing
from fleetshare.autoscaling.provisioner.problem import build_problem
from fleetshare.model.catalog import load_catalog

CATALOG = load_catalog()
FAMILIES = ["c6a", "m6a", "r6a"]
ZONES = ("z1", "z2")
MI = 2**20


def batch() -> list[PodShape]:
    """40 deployments of 5-40 pods, Karpenter-benchmark requests: generic, one per node
    (anti-affinity), spread over zones, all in one zone."""
    shapes = []
    for k in range(40):
        cpu = (100, 250, 500, 1000, 1500)[k % 5]
        mem = (100, 256, 512, 1024, 2048, 4096)[(k * 7) % 6]
        kind = k % 4
        shapes.append(
            PodShape(
                (("cpu", cpu), ("memory", mem * MI * 1000)),
                5 + (k * 13) % 36,
                workloads=(f"d{k}",),
                max_per_node=1 if kind == 1 else None,
                zone_spread=kind == 2,
                same_zone=kind == 3,
            )
        )
    return shapes


def check(plan: Plan, shapes: list[PodShape]) -> None:
    """Independent check: resources and pods per node, every pod planned, caps kept."""
    placed: Counter[int] = Counter()
    for node in plan.nodes:
        alloc = CATALOG.get(node.instance_type).allocatable
        used: Counter[str] = Counter()
        for s, k in node.pods:
            placed[s] += k
            used["pods"] += 1000 * k
            for r, v in shapes[s].requests:
                used[r] += v * k
            assert shapes[s].max_per_node is None or k <= shapes[s].max_per_node
        assert all(v <= alloc.get(r, 0) for r, v in used.items()), node
    assert not plan.unplaceable
    assert [placed[s] for s in range(len(shapes))] == [s.count for s in shapes]


POOLS = [NodePool(name="cpu", families=FAMILIES)]
OFFERS = [
    Offering(t.name, z, "on-demand", t.price_per_hour)
    for t in CATALOG
    if t.family in FAMILIES and t.price_per_hour is not None
    for z in ZONES
]


def test_the_fluid_plan_fits_and_is_never_dearer_than_the_plain_path() -> None:
    shapes = batch()
    pools, offers = POOLS, OFFERS
    # without the dive (it runs on whichever plan is not within 1 % of the bound, here the
    # plain one, and would compare the dive rather than the fluid plan)
    no_dive = PlanBudget(dive_gap=float("inf"))
    fluid = plan_nodes(shapes, pools, CATALOG, offers, budget=no_dive)
    plain = plan_nodes(shapes, pools, CATALOG, offers, budget=replace(no_dive, fluid_passes=0))
    assert "cost_fluid" in fluid.stats and "cost_fluid" not in plain.stats
    check(fluid, shapes)
    check(plain, shapes)
    assert fluid.hourly_cost <= plain.hourly_cost + 1e-9
    assert fluid.lower_bound <= fluid.hourly_cost
    # the fluid LP's bound holds for both plans and is at least the resource prices' bound
    assert fluid.stats["resource_bound"] <= fluid.stats["fluid_bound"] + 1e-9
    assert fluid.stats["fluid_bound"] <= min(fluid.hourly_cost, plain.hourly_cost) + 1e-9


def test_a_fluid_plan_reusing_earlier_solves_is_the_one_solved_afresh() -> None:
    p = build_problem(batch(), POOLS, CATALOG, OFFERS, {}, None, (), Plan())
    assert p is not None
    lam = resource_prices(p)[2]
    budget = PlanBudget(fluid_passes=3)
    fresh, bound = fluid_packing(p, lam, budget, SafetyNet(600), {})
    solves: Solves = {}
    first, _ = fluid_packing(p, lam, budget, SafetyNet(600), solves)
    n_solves = len(solves)
    assert n_solves >= 1
    again, again_bound = fluid_packing(p, lam, budget, SafetyNet(600), solves)
    assert len(solves) == n_solves  # every LP of the second plan was solved before
    for pack in (first, again):
        assert pack is not None and fresh is not None
        assert pack.n == fresh.n
        assert (pack.cand[: pack.n] == fresh.cand[: fresh.n]).all()
        assert np.array_equal(pack.counts[: pack.n], fresh.counts[: fresh.n])
    assert again_bound == bound
