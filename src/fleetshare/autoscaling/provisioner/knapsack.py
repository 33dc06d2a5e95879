"""Exact pricing for column generation: a candidate's knapsack (the most its one node is worth
at the covering duals) solved as a small MILP (HiGHS via scipy), with HiGHS's dual bound as a
proven upper bound when a node limit stops it first.

A node's pattern holds whole pods of each class (a bundle of pods that must share one node is
one pod of its class), within the candidate's capacity in every resource and each class's
per-node limit (``Problem.fit``: anti-affinity caps, zones and labels); that is every node a
plan may open, so the upper bounds make a valid Farley bound on the master
(:func:`~fleetshare.autoscaling.provisioner.bound.lower_bound`).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import Bounds, LinearConstraint

from fleetshare.autoscaling.provisioner.problem import Problem
from fleetshare.autoscaling.provisioner.solver import mip


def knapsack(p: Problem, j: int, pi: np.ndarray, nodes: int) -> tuple[float, np.ndarray]:
    """Candidate ``j``'s knapsack at duals ``pi`` (at most ``nodes`` branch-and-bound nodes):
    an upper bound on the value of any pattern of ``j`` (the optimum when HiGHS proves it)
    and the best pattern found (C)."""
    pattern = np.zeros(p.n_classes, np.int64)
    active = np.flatnonzero((p.fit[:, j] > 0) & (pi > 0))
    if not len(active):
        return 0.0, pattern
    res = mip(
        c=-pi[active],
        constraints=[
            LinearConstraint(p.size[active].T.astype(float), -np.inf, p.cap[j].astype(float))
        ],
        integrality=np.ones(len(active)),
        bounds=Bounds(0, p.fit[active, j].astype(float)),
        options={"node_limit": nodes, "mip_rel_gap": 1e-9},
    )
    if res.x is not None:
        pattern[active] = np.round(np.asarray(res.x)).astype(np.int64)
    value = float(pi @ pattern)
    dual = getattr(res, "mip_dual_bound", None)
    if res.status not in (0, 1) or dual is None or not np.isfinite(dual):
        return float(pi[active] @ p.fit[active, j]), pattern  # every pod at its cap: trivial
    # HiGHS proves the optimum to a relative gap: widen its bound by that and a tolerance
    return max(value, -float(dual) * (1 + 1e-9) + 1e-12), pattern


def exact_pricing(
    p: Problem,
    pi: np.ndarray,
    net_cost: np.ndarray,
    upper: np.ndarray,
    patterns: np.ndarray,
    most: int,
    nodes: int,
) -> int:
    """Tighten ``upper`` (J: upper bounds on each candidate's knapsack, e.g. its LP value) in
    place with exact knapsacks, and put the patterns they find into ``patterns`` (J x C) where
    they are worth more.

    Candidates are solved in order of ``(upper - ...) / net_cost`` (what bounds the Farley
    ratio; ``net_cost``: the candidate's price plus its limit rows' duals), highest first,
    until the next one's bound is no higher than the best ratio proven, or ``most`` knapsacks
    are solved. Candidates with the same capacity and per-node limits share one solve. Returns
    the knapsacks solved."""
    solved: dict[bytes, tuple[float, np.ndarray]] = {}
    order = np.argsort(-(upper / net_cost), kind="stable")
    proven = -np.inf
    for j in order.tolist():
        if upper[j] / net_cost[j] <= proven:
            break
        key = p.cap[j].tobytes() + p.fit[:, j].tobytes()
        if key not in solved:
            if len(solved) >= most:
                break
            solved[key] = knapsack(p, j, pi, nodes)
        bound, pattern = solved[key]
        upper[j] = min(upper[j], bound)
        if pattern @ pi > patterns[j] @ pi:
            patterns[j] = pattern
        proven = max(proven, upper[j] / net_cost[j])
    return len(solved)
