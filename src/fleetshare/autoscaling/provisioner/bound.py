"""Lower bounds on the cost of any plan: resource prices (a feasible dual of the master LP),
knapsack upper bounds, and Farley scaling of the column-generation duals.
"""

from __future__ import annotations

import numpy as np

from fleetshare.autoscaling.provisioner.problem import Problem
from fleetshare.autoscaling.provisioner.solver import lp


def resource_prices(p: Problem) -> tuple[float, np.ndarray]:
    """The best bound from resource prices alone: max sum_c d_c (lam·s_c) s.t. lam·cap_j <= c_j
    for every candidate (then pi_c = lam·s_c is dual feasible). Returns the bound and pi."""
    res = lp(
        -(p.demand @ p.size).astype(float),
        A_ub=p.cap.astype(float),
        b_ub=p.obj,
        bounds=(0, None),
    )
    if res.status != 0:
        return 0.0, np.zeros(p.n_classes)
    lam = np.asarray(res.x)
    pi = p.size @ lam
    return float(pi @ p.demand), np.minimum(pi, p.penalty)


def knapsack_upper(p: Problem, pi: np.ndarray) -> np.ndarray:
    """An upper bound on every candidate's knapsack value: the least of fractional relaxations
    of surrogate constraints (each resource alone, and the price-weighted sum)."""
    J = p.cap.shape[0]
    active = np.flatnonzero(pi > 1e-12)
    if not len(active):
        return np.zeros(J)
    best = np.full(J, np.inf)
    avail = p.fit[active].astype(float)  # Ca x J
    piv = pi[active]
    for w in p.weights:
        ws = p.size[active] @ w
        capw = p.cap @ w
        dens = np.where(ws > 0, piv / np.maximum(ws, 1e-300), np.inf)
        order = np.argsort(-dens, kind="stable")
        a, wso, pio = avail[order], ws[order], piv[order]
        cum_w = np.cumsum(a * wso[:, None], axis=0)
        cum_v = np.cumsum(a * pio[:, None], axis=0)
        over = cum_w > capw[None, :] + 1e-9
        has = over.any(axis=0)
        k = np.argmax(over, axis=0)
        prev_w = np.where(k > 0, cum_w[np.maximum(k - 1, 0), np.arange(J)], 0.0)
        prev_v = np.where(k > 0, cum_v[np.maximum(k - 1, 0), np.arange(J)], 0.0)
        frac = (capw - prev_w) / np.maximum(wso[k], 1e-300)
        part = prev_v + pio[k] * np.minimum(frac, a[k, np.arange(J)])
        value = np.where(has, part, cum_v[-1])
        best = np.minimum(best, value)
    return best


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
