"""Price and dive (``provisioner/dive.py``): every node it plans fits its candidate and keeps
the pods' constraints (capacity, per-node caps, zones, host-sharing gangs on one node), it
finds the brute-force optimum on small cases, and the same input gives the same plan."""

from __future__ import annotations

from collections import Counter

import numpy as np

from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner import Plan, PlanBudget, PodShape, plan_nodes
from fleetshare.autoscaling.provisioner.bound import resource_prices
from fleetshare.autoscaling.provisioner.budget import SafetyNet
from fleetshare.autoscaling.provisioner.columns import Columns
from fleetshare.autoscaling.provisioner.dive import add_nodes, pattern_dive
from fleetshare.autoscaling.provisioner.greedy import greedy
from fleetshare.autoscaling.provisioner.packing import Packing
from fleetshare.autoscaling.provisioner.problem import Problem, build_problem
from fleetshare.model.node import HOSTNAME_LABEL
from tests import test_provisioner_knapsack as small
from tests.test_provisioner_fluid import CATALOG, FAMILIES, MI, OFFERS, POOLS, batch, check

ALWAYS = PlanBudget(dive_gap=-1.0)  # dive whatever the gap


def shapes_with_gangs() -> list[PodShape]:
    """The fluid tests' batch plus 6 gangs of 8 pods that must share one host."""
    gangs = [
        PodShape(
            (("cpu", (250, 500, 1000)[g % 3]), ("memory", (256, 1024)[g % 2] * MI * 1000)),
            8,
            workloads=(f"gang-{g}",),
            gang=f"gang-{g}",
            domain=HOSTNAME_LABEL,
        )
        for g in range(6)
    ]
    return batch() + gangs


def dive(p: Problem) -> tuple[Packing, dict[str, float]]:
    """The dive from a pool of the greedy plans' nodes, filled and right-sized by the greedy."""
    _, pi_res, _ = resource_prices(p)
    pool = Columns()
    for rule in ("pod", "big"):
        add_nodes(pool, greedy(p, rule))
    budget = PlanBudget()
    pack, stats = pattern_dive(p, pool, budget, SafetyNet(600), pi_res, budget.dive_work // 2)
    return greedy(p, "spread", start=pack), stats


def test_every_node_of_the_dive_fits_its_candidate_and_the_pods_constraints() -> None:
    p = build_problem(shapes_with_gangs(), POOLS, CATALOG, OFFERS, {}, None, (), Plan())
    assert p is not None
    pack, stats = dive(p)
    assert stats["dive_steps"] >= 1
    counts, cand = pack.counts[: pack.n], pack.cand[: pack.n]
    assert (counts.sum(axis=0) >= p.demand).all()  # every pod planned
    assert (counts @ p.size <= p.cap[cand]).all()  # capacity of every resource
    assert (counts <= p.upper[None, :]).all()  # per-node caps (anti-affinity)
    on = counts > 0
    assert p.allowed[:, cand].T[on].all()  # zones and pools
    # a gang that must share a host is one bundle of its 8 pods (one unit of its class, sized
    # for all 8), so a node holds it whole or not at all
    bundles = np.array([p.unit[p.items[m[0]].shape] for m in p.class_items]) == 8
    assert p.demand[bundles].sum() == 6
    assert (counts[:, bundles].sum(axis=0) == p.demand[bundles]).all()


def test_plans_through_the_dive_keep_gangs_on_one_host_and_are_never_dearer() -> None:
    shapes = shapes_with_gangs()
    dived = plan_nodes(shapes, POOLS, CATALOG, OFFERS, budget=ALWAYS, time_limit=600)
    plain = plan_nodes(
        shapes, POOLS, CATALOG, OFFERS, budget=PlanBudget(dive_gap=10.0), time_limit=600
    )
    assert "cost_dive_1" in dived.stats and "cost_dive_1" not in plain.stats
    check(dived, shapes)
    hosts: dict[str, set[int]] = {}
    for n, node in enumerate(dived.nodes):
        for s, k in node.pods:
            if shapes[s].gang is not None and k:
                assert k == shapes[s].count  # the whole gang on this node
                hosts.setdefault(shapes[s].gang or "", set()).add(n)
    assert len(hosts) == 6 and all(len(h) == 1 for h in hosts.values())
    assert dived.hourly_cost <= plain.hourly_cost + 1e-9  # the dearer of the two is not kept
    assert dived.lower_bound <= dived.hourly_cost + 1e-9


def test_the_dive_finds_the_brute_force_optimum_on_small_cases() -> None:
    found = 0
    for shapes in small.cases():
        p = small.build(shapes)
        best = small.optimum(p)
        pack, stats = dive(p)
        cost = float(p.obj[pack.cand[: pack.n]].sum())
        assert (pack.covered() >= p.demand).all()
        assert cost >= best - 1e-9  # a plan, so never below the optimum
        if abs(stats["dive_lp"] - best) <= 1e-9:  # the pattern LP is integral: the dive takes it
            assert abs(cost - best) <= 1e-9
        found += abs(cost - best) <= 1e-9
    assert found >= 6  # of 8 (7 at the time of writing)


def test_the_same_input_gives_the_same_dive_and_plan() -> None:
    shapes = shapes_with_gangs()
    p1 = build_problem(shapes, POOLS, CATALOG, OFFERS, {}, None, (), Plan())
    p2 = build_problem(list(shapes), POOLS, CATALOG, OFFERS, {}, None, (), Plan())
    assert p1 is not None and p2 is not None
    a, b = dive(p1)[0], dive(p2)[0]
    assert a.n == b.n
    assert (a.cand[: a.n] == b.cand[: b.n]).all() and (a.counts[: a.n] == b.counts[: b.n]).all()
    first = plan_nodes(shapes, POOLS, CATALOG, OFFERS, budget=ALWAYS, time_limit=600)
    again = plan_nodes(list(shapes), POOLS, CATALOG, OFFERS, budget=ALWAYS, time_limit=600)
    assert first.launches == again.launches
    assert Counter(n.pods for n in first.nodes) == Counter(n.pods for n in again.nodes)


def test_the_dive_keeps_pool_limits() -> None:
    """A CPU limit below what the pods need, with a node count limit: the nodes the dive opens
    (whole nodes of the LP and its round-ups) stay within every limit row."""
    for most in (5, 20):
        pools = [NodePool(name="cpu", families=FAMILIES, limits={"nodes": most, "cpu": "100"})]
        p = build_problem(shapes_with_gangs(), pools, CATALOG, OFFERS, {}, None, (), Plan())
        assert p is not None and len(p.limits)
        pack, _ = dive(p)
        use = p.limits.matrix[:, pack.cand[: pack.n]].sum(axis=1)
        assert pack.n > 0 and (use <= p.limits.headroom + 1e-9).all()
