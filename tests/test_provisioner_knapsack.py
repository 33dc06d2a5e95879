"""Exact pricing and the pattern-LP bound on small hand-built problems whose optimum is found by
brute force: every knapsack bound is at least the best pattern, and the lower bound from column
generation (at every budget, however early it stops) is never above the cheapest plan."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner import PodShape, plan_nodes
from fleetshare.autoscaling.provisioner.bound import resource_prices
from fleetshare.autoscaling.provisioner.budget import PlanBudget, SafetyNet
from fleetshare.autoscaling.provisioner.columns import Columns, add_singletons, column_generation
from fleetshare.autoscaling.provisioner.knapsack import exact_pricing, knapsack
from fleetshare.autoscaling.provisioner.problem import Problem, build_problem
from fleetshare.autoscaling.provisioner.result import Plan
from fleetshare.model.catalog import Catalog
from fleetshare.model.node import HOSTNAME_LABEL
from tests.catalog_helpers import cpu_type

GI = 2**30 * 1000  # memory in milli-bytes

# (vCPU, GiB, $/h): prices not in proportion to size, so the cheapest packing is not obvious
TYPES = ((2, 4, 0.10), (4, 8, 0.17), (4, 32, 0.26), (8, 16, 0.37), (16, 32, 0.70))


def catalog() -> Catalog:
    return Catalog(
        cpu_type(
            f"t-{i}",
            family="t",
            vcpu=cpu,
            memory_mib=mem * 1024,
            allocatable={"cpu": cpu * 1000, "memory": mem * GI, "pods": 110_000},
            price=price,
        )
        for i, (cpu, mem, price) in enumerate(TYPES)
    )


def cases() -> list[list[PodShape]]:
    """Small batches: mixed CPU/memory pods, one per node (anti-affinity), a gang of pods that
    must share one host."""
    rng = np.random.default_rng(7)
    out = []
    for k in range(8):
        shapes = []
        for s in range(3):
            cpu = int(rng.choice((500, 1000, 1500, 3000)))
            mem = int(rng.choice((1, 2, 6, 12)))
            count = int(rng.integers(1, 5))
            kind = (k + s) % 4
            shapes.append(
                PodShape(
                    (("cpu", cpu), ("memory", mem * GI)),
                    count if kind != 2 else 2,
                    max_per_node=1 if kind == 1 else None,
                    gang=f"g{k}-{s}" if kind == 2 else None,
                    domain=HOSTNAME_LABEL if kind == 2 else None,
                )
            )
        out.append(shapes)
    return out


def build(shapes: list[PodShape]) -> Problem:
    cat = catalog()
    offers = [Offering(t.name, "z1", "on-demand", t.price_per_hour or 0) for t in cat]
    p = build_problem(
        shapes, [NodePool(name="p", families=["t"])], cat, offers, {}, None, (), Plan()
    )
    assert p is not None
    return p


def patterns(p: Problem, j: int) -> list[np.ndarray]:
    """Every pattern of candidate ``j`` (whole pods within capacity and per-node limits)."""
    ranges = [range(int(p.fit[c, j]) + 1) for c in range(p.n_classes)]
    out = []
    for a in itertools.product(*ranges):
        arr = np.array(a, np.int64)
        if (arr @ p.size <= p.cap[j]).all():
            out.append(arr)
    return out


def optimum(p: Problem) -> float:
    """The cheapest plan covering every pod, by dynamic programming over what is left."""
    options = [(float(p.obj[j]), a) for j in range(len(p.obj)) for a in patterns(p, j) if a.any()]

    @functools.cache
    def cost(left: tuple[int, ...]) -> float:
        if not any(left):
            return 0.0
        need = np.array(left)
        best = np.inf
        for price, a in options:
            if (a[need > 0] > 0).any():
                best = min(best, price + cost(tuple(np.maximum(need - a, 0).tolist())))
        return best

    return cost(tuple(p.demand.tolist()))


def cg_bound(p: Problem, budget: PlanBudget) -> float:
    res, pi_res, _ = resource_prices(p)
    cols = Columns()
    add_singletons(p, cols)
    return column_generation(p, cols, budget, SafetyNet(600), res, pi_res).bound


def test_an_exact_knapsack_bounds_every_pattern_and_finds_the_best() -> None:
    for shapes in cases()[:4]:
        p = build(shapes)
        pi = np.linspace(0.05, 0.3, p.n_classes)
        for j in range(len(p.obj)):
            best = max(float(a @ pi) for a in patterns(p, j))
            upper, pattern = knapsack(p, j, pi, nodes=1000)
            assert (pattern @ p.size <= p.cap[j]).all() and (pattern <= p.fit[:, j]).all()
            assert np.isclose(float(pattern @ pi), best) and upper >= best - 1e-12
            # stopped after one branch-and-bound node: the bound still holds
            assert knapsack(p, j, pi, nodes=1)[0] >= best - 1e-12


def test_exact_pricing_only_lowers_the_bounds_and_never_below_a_pattern() -> None:
    p = build(cases()[1])
    pi = np.linspace(0.3, 0.05, p.n_classes)
    best = np.array([max(float(a @ pi) for a in patterns(p, j)) for j in range(len(p.obj))])
    upper = best * 1.5 + 0.1  # loose bounds, as an LP relaxation gives
    pats = np.zeros((len(p.obj), p.n_classes), np.int64)
    solved = exact_pricing(p, pi, p.obj.copy(), upper, pats, most=100, nodes=1000)
    assert 1 <= solved <= len(p.obj)
    assert (upper >= best - 1e-12).all() and (upper <= best * 1.5 + 0.1).all()
    # the candidate of the highest ratio is solved to its optimum
    top = int(np.argmax(upper / p.obj))
    assert np.isclose(upper[top], best[top]) and np.isclose(pats[top] @ pi, best[top])


@pytest.mark.parametrize("k", range(8))
def test_the_bound_never_exceeds_the_cheapest_plan(k: int) -> None:
    p = build(cases()[k])
    best = optimum(p)
    assert np.isfinite(best)
    for budget in (
        PlanBudget(cg_rounds=1, lp_pricing_always=True),
        PlanBudget(cg_rounds=3, lp_pricing_always=True, knapsack_nodes=1),
        PlanBudget(cg_rounds=50, lp_pricing_always=True, exact_pricings=500),
        PlanBudget(cg_rounds=50, exact_pricings=0),
    ):
        assert cg_bound(p, budget) <= best + 1e-9
    plan = plan_nodes(cases()[k], [NodePool(name="p", families=["t"])], catalog(), offers())
    assert plan.lower_bound <= best + 1e-9 <= plan.hourly_cost + 2e-9


def offers() -> list[Offering]:
    return [Offering(t.name, "z1", "on-demand", t.price_per_hour or 0) for t in catalog()]


def test_exact_pricing_makes_the_bound_at_least_as_tight_as_lp_pricing() -> None:
    tighter = 0
    for shapes in cases():
        p = build(shapes)
        lp_only = cg_bound(p, PlanBudget(cg_rounds=50, exact_pricings=0))
        exact = cg_bound(p, PlanBudget(cg_rounds=50, lp_pricing_always=True, exact_pricings=500))
        assert exact >= lp_only - 1e-9
        tighter += exact > lp_only + 1e-6
    assert tighter >= 1  # integer knapsacks are worth less than their LP on some case
