"""Column generation's pieces on the mixed batch: LP pricing bounds every knapsack and its
patterns fit; LP rounding gives nodes that fit and never more pods than asked for; the local
search's move targets are cheaper candidates the node's pods may use."""

from __future__ import annotations

import numpy as np

from fleetshare.autoscaling.provisioner.bound import resource_prices
from fleetshare.autoscaling.provisioner.budget import PlanBudget, SafetyNet
from fleetshare.autoscaling.provisioner.columns import (
    Columns,
    _price_greedy,
    _price_lp,
    add_singletons,
    column_generation,
    round_columns,
)
from fleetshare.autoscaling.provisioner.greedy import greedy
from fleetshare.autoscaling.provisioner.local_search import _node_allowed, _targets
from fleetshare.autoscaling.provisioner.problem import Problem, build_problem
from fleetshare.autoscaling.provisioner.result import Plan
from tests.test_provisioner_determinism import mixed_batch


def problem() -> Problem:
    shapes, pools, catalog, offers = mixed_batch()
    p = build_problem(shapes, pools, catalog, offers, {}, None, (), Plan())
    assert p is not None
    return p


def fits(p: Problem, patterns: np.ndarray) -> bool:
    """Every candidate's pattern within its capacity and every class within its per-node cap."""
    return bool((patterns @ p.size <= p.cap).all() and (patterns <= p.fit.T).all())


def test_lp_pricing_bounds_every_knapsack_and_its_patterns_fit() -> None:
    p = problem()
    pi = np.linspace(0.01, 0.2, p.n_classes)  # any non-negative duals
    upper, values, patterns = _price_lp(p, pi)
    greedy_values, greedy_patterns = _price_greedy(p, pi)
    assert fits(p, patterns) and fits(p, greedy_patterns)
    assert np.allclose(values, patterns @ pi)
    # the LP value bounds every integer pattern, the greedy ones included
    assert (upper >= values - 1e-9).all() and (upper >= greedy_values - 1e-9).all()


def test_lp_rounding_fits_and_never_plans_more_pods_than_asked() -> None:
    p = problem()
    bound, pi, _ = resource_prices(p)
    cols = Columns()
    add_singletons(p, cols)
    relax = column_generation(p, cols, PlanBudget(cg_rounds=10), SafetyNet(600), bound, pi)
    assert relax.bound <= relax.value + 1e-9
    pack = round_columns(p, cols, relax.y, passes=5)
    used = pack.counts[: pack.n] @ p.size
    assert (used <= p.cap[pack.cand[: pack.n]]).all()
    assert (pack.counts[: pack.n] <= p.fit[:, pack.cand[: pack.n]].T).all()
    assert (pack.covered() <= p.demand).all()
    assert (pack.counts[: pack.n].sum(axis=1) > 0).all()  # no empty node is opened


def test_local_search_targets_are_cheaper_allowed_and_the_next_cheaper_first() -> None:
    p = problem()
    pack = greedy(p, "pod")
    for n in range(pack.n):
        cur = int(pack.cand[n])
        ok = _node_allowed(p, pack, n) & (p.obj < p.obj[cur] - 1e-12)
        got = _targets(p, pack, n, ok, 3)
        assert len(got) == min(3, int(ok.sum())) and len(set(got)) == len(got)
        assert all(ok[j] for j in got)
        if got:  # the next cheaper candidate, then by how far the node's pods overflow them
            assert p.obj[got[0]] == p.obj[ok].max()
            short = [float((np.maximum(pack.used[n] - p.cap[j], 0) / p.capref).sum()) for j in got]
            assert short[1:] == sorted(short[1:])
