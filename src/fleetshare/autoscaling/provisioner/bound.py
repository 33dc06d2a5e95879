"""Lower bounds on the cost of any plan: resource prices (a feasible dual of the master LP),
and Farley scaling of the column-generation duals (with knapsack upper bounds from the LP
pricing).
"""

from __future__ import annotations

import numpy as np

from fleetshare.autoscaling.provisioner.problem import Problem
from fleetshare.autoscaling.provisioner.solver import lp


def resource_prices(p: Problem) -> tuple[float, np.ndarray, np.ndarray]:
    """The best bound from resource prices alone: max sum_c d_c (lam·s_c) s.t. lam·cap_j <= c_j
    for every candidate (then pi_c = lam·s_c is dual feasible). Returns the bound, pi and
    lam."""
    res = lp(
        -(p.demand @ p.size).astype(float),
        A_ub=p.cap.astype(float),
        b_ub=p.obj,
        bounds=(0, None),
    )
    if res.status != 0:
        return 0.0, np.zeros(p.n_classes), np.zeros(p.cap.shape[1])
    lam = np.asarray(res.x)
    pi = p.size @ lam
    return float(pi @ p.demand), np.minimum(pi, p.penalty), lam


def most_nodes(p: Problem) -> np.ndarray:
    """Per candidate, the most nodes the limit rows allow (inf when no row limits it)."""
    L = p.limits.matrix
    if not len(L):
        return np.full(len(p.obj), np.inf)
    per_row = np.where(L > 0, p.limits.headroom[:, None] / np.where(L > 0, L, 1), np.inf)
    return np.asarray(np.floor(per_row.min(axis=0) + 1e-9))


def lower_bound(
    p: Problem, z: float, pi: np.ndarray, mu: np.ndarray, value_ub: np.ndarray
) -> float:
    """A valid lower bound on the LP optimum from the duals (Farley scaling, with Lagrangian
    terms for candidates whose count a limit row bounds)."""
    L = p.limits.matrix
    net = value_ub - (mu @ L if len(L) else 0.0)
    ymax = most_nodes(p)
    best = -np.inf
    for lagrange in (np.isfinite(ymax), np.isfinite(ymax) & (p.price <= p.obj * 0.999), None):
        lag = np.zeros(len(p.obj), bool) if lagrange is None else lagrange
        ratio = np.where(lag, 0.0, net / p.obj)
        theta = max(1.0, float(ratio.max(initial=1.0)))
        excess = np.maximum(0.0, net / theta - p.obj)
        bound = z / theta - float((ymax[lag] * excess[lag]).sum())
        best = max(best, bound)
    return best


def covering_dual_bound(
    obj: np.ndarray,
    cap: np.ndarray,
    size: np.ndarray,
    fit: np.ndarray,
    demand: np.ndarray,
    u: np.ndarray,
    node_rows: np.ndarray,
    node_need: np.ndarray,
    nu: np.ndarray,
    prices: np.ndarray,
) -> tuple[float, np.ndarray]:
    """A lower bound on every plan that covers ``demand``, from covering duals ``u`` (one per
    group of pods of size ``size[g]``) and node-count duals ``nu`` (rows ``node_rows[i]``: at
    least ``node_need[i]`` nodes among those candidates); and per candidate, what its node is
    worth at those duals over its price (above 1: the duals undervalue it).

    The relaxation: ``x[g, j]`` pods of group g on ``y[j]`` nodes of candidate j, every group
    covered, ``sum_g size[g] x[g, j] <= cap[j] y[j]``, ``x[g, j] <= fit[g, j] y[j]`` (0: g may
    not use j) and the node-count rows; every plan is feasible for it. Its dual needs, per
    candidate j, capacity prices ``v`` with ``cap[j]·v + sum_g fit[g, j] max(0, u[g] -
    size[g]·v) + sum_{i: j in row i} nu[i] <= obj[j]``. Each candidate takes the best of the
    ``prices`` (P x J x R) on offer; where none satisfies it, ``u`` and ``nu`` are scaled down
    by the worst ratio (Farley), so the bound holds whatever duals are passed in."""
    if not len(u) or not len(obj):
        return 0.0, np.zeros(len(obj))
    best = np.full(len(obj), np.inf)
    for v in prices:  # J x R
        over = np.maximum(u[:, None] - size @ v.T, 0.0)  # G x J
        best = np.minimum(best, (cap * v).sum(axis=1) + (fit * over).sum(axis=0))
    ratio = (best + (nu @ node_rows if len(nu) else 0.0)) / obj
    theta = max(1.0, float(ratio.max()))
    return float((demand @ u + node_need @ nu) / theta), ratio
