"""A plan from the fluid LP: how many nodes of each candidate and which pods they hold in
aggregate, taken in whole nodes and packed node by node.

The fluid LP (the compact model) has a variable per candidate (nodes, fractional) and per
(group of classes, candidate) pair (pods): every group covered; the pods on a candidate within
its nodes' summed capacity; a group that only few fit per node, or that is capped (at most
``upper`` per node), at most that many per node; and for the capped classes of one allowed set
at least ``ceil(demand / upper)`` nodes where they may run. Classes of the same size, allowed
candidates and cappedness are one group (capped deployments of one size together, their caps
summed), so the LP stays small. Node capacity is seen in aggregate, which is close when pods
are small against nodes, so the LP runs over the candidates near the resource prices'
frontier (:func:`frontier`); candidates its duals value above their price then join and it is
solved again (``fluid_pricing`` times at most). Its duals give a proven lower bound on every
plan (:func:`~fleetshare.autoscaling.provisioner.bound.covering_dual_bound`, checked over all
candidates). Each pass takes the whole nodes of the solution (rounded down) with their share
of its pods, packs them evenly (capped classes first), puts the pods still needed into the
room left, and solves again for the rest, over the candidates the first solve used and each
class's cheapest; when no whole node is left, one node of the largest fraction the limit rows
allow (a fraction of a node within a limit is no node within it). What is left after the
passes is the caller's to fill (the greedy), which also right-sizes every node.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from fleetshare.autoscaling.provisioner.bound import covering_dual_bound
from fleetshare.autoscaling.provisioner.budget import PlanBudget, SafetyNet
from fleetshare.autoscaling.provisioner.greedy import even_shares, fill
from fleetshare.autoscaling.provisioner.packing import Packing
from fleetshare.autoscaling.provisioner.problem import Problem
from fleetshare.autoscaling.provisioner.solver import lp

FEW = 8
"""Pairs where a node holds at most this many of the class get a per-node row (the floor
matters there; elsewhere aggregate capacity is close enough)."""

RATIO_TOL = 1e-6
"""A candidate joins the fluid LP when the duals value its node this much above its price."""

PRICE_SCALES = (0.9, 1.0, 1.02, 1.05, 1.1, 1.2)
"""Capacity prices the fluid bound tries for every candidate: the resource prices times these
(the best per candidate counts)."""


def frontier(p: Problem, lam: np.ndarray, slack: float, most: int) -> np.ndarray | None:
    """Candidates priced at most ``slack`` above their capacity's value at resource prices
    ``lam``, and every class's cheapest candidate per pod (ties: the lower index); None when
    more than ``most`` are that close (prices nearly proportional to size: any packing of full
    nodes is then close to optimal, and the greedy plans find one faster)."""
    over = p.obj / np.maximum(p.cap @ lam, 1e-300) - 1.0
    near = over <= slack + 1e-12
    if near.sum() > most:
        return None
    near[_cheapest(p)] = True
    return np.flatnonzero(near)


def _cheapest(p: Problem) -> np.ndarray:
    """Every class's cheapest candidate per pod (ties: the lower index)."""
    per_pod = np.where(p.fit > 0, p.obj[None, :] / np.maximum(p.fit, 1), np.inf)
    cheapest = np.argmin(per_pod, axis=1)
    return np.unique(cheapest[np.isfinite(per_pod.min(axis=1))])


def _groups(p: Problem, demand: np.ndarray) -> tuple[np.ndarray, int]:
    """Classes the fluid LP merges: the same size and allowed candidates, and capped or not
    alike (capped deployments of one size become one group). Returns each class's group
    (-1: no demand) and the number of groups."""
    key: dict[tuple[bytes, int, bool], int] = {}
    group = np.full(p.n_classes, -1, np.int64)
    for c in np.flatnonzero(demand > 0).tolist():
        k = (p.size[c].tobytes(), int(p.allowed_id[c]), bool(p.upper[c] < demand[c]))
        group[c] = key.setdefault(k, len(key))
    return group, len(key)


class FluidSolution(NamedTuple):
    """One fluid LP solve: nodes per candidate of ``keep`` (K), pods per candidate and class
    (K x C), and a proven lower bound on every plan for the demand solved
    (:func:`~fleetshare.autoscaling.provisioner.bound.covering_dual_bound` over all
    candidates, from this solve's duals)."""

    y: np.ndarray
    pods: np.ndarray
    bound: float
    ratio: np.ndarray
    """Per candidate, its worth at the duals over its price (above 1: may lower the LP)."""


def _group_fit(p: Problem, rep: np.ndarray, g_cap: np.ndarray, g_demand: np.ndarray) -> np.ndarray:
    """G x J: how many pods of each group one node of each candidate holds (a capped group at
    most the sum of its classes' caps, another at most its demand; 0: the group may not use
    the candidate)."""
    res_fit = np.floor_divide(p.cap[None, :, :], np.maximum(p.size[rep][:, None, :], 1))
    res_fit = np.where(p.size[rep][:, None, :] > 0, res_fit, np.iinfo(np.int64).max).min(axis=2)
    # not the representative's own fit (cut at its own demand): a node holds at most the
    # group's summed caps, or when uncapped its whole demand
    cut = np.minimum(res_fit, np.where(g_cap > 0, g_cap, g_demand)[:, None])
    return np.asarray(np.where(p.fit[rep] > 0, cut, 0).astype(float))


def fluid_lp(
    p: Problem, keep: np.ndarray, demand: np.ndarray, head: np.ndarray, lam: np.ndarray
) -> FluidSolution | None:
    """The fluid LP over candidates ``keep`` for ``demand`` within limit ``head``room, or
    None without a solution; ``lam`` (resource prices) is one of the capacity prices the
    bound tries.

    Classes are merged into groups (:func:`_groups`); a capped group holds at most the sum of
    its classes' caps per node, and a group's pods on a candidate go back to its classes in
    proportion to their demand."""
    K, R = len(keep), p.cap.shape[1]
    group, G = _groups(p, demand)
    members = group >= 0
    first = np.unique(group[members], return_index=True)[1]
    rep = np.flatnonzero(members)[first]  # a class of each group
    g_demand = np.bincount(group[members], weights=demand[members], minlength=G)
    capped_c = members & (p.upper < demand)
    g_cap = np.bincount(group[capped_c], weights=p.upper[capped_c], minlength=G)
    fit_all = _group_fit(p, rep, g_cap, g_demand)
    fit = fit_all[:, keep]  # G x K
    gs, ks = np.nonzero(fit > 0)
    n = len(gs)
    x = K + np.arange(n)
    rows = [gs]  # covering: -sum_k x_gk <= -d_g
    cols = [x]
    vals = [-np.ones(n)]
    for r in range(R):  # capacity: sum_g s_gr x_gk - cap_kr y_k <= 0
        rows += [G + ks * R + r, G + np.arange(K) * R + r]
        cols += [x, np.arange(K)]
        vals += [p.size[rep[gs], r].astype(float), -p.cap[keep, r].astype(float)]
    # capped classes of one allowed set: at least ceil(d / upper) nodes where they may run
    need: dict[int, int] = {}
    for c in np.flatnonzero(capped_c).tolist():
        u = int(p.allowed_id[c])
        need[u] = max(need.get(u, 0), -(-int(demand[c]) // int(p.upper[c])))
    base = G + K * R
    b_extra = []
    for i, (u, count) in enumerate(sorted(need.items())):
        ok = np.flatnonzero(p.allowed_rows[u][keep])
        rows.append(np.full(len(ok), base + i))
        cols.append(ok)
        vals.append(-np.ones(len(ok)))
        b_extra.append(-float(count))
    # groups that few fit per node, and capped ones: at most that many per node
    few = np.flatnonzero((fit[gs, ks] <= FEW) | (g_cap[gs] > 0))
    n_rows = base + len(need)
    rows += [n_rows + np.arange(len(few)), n_rows + np.arange(len(few))]
    cols += [x[few], ks[few]]
    vals += [np.ones(len(few)), -fit[gs[few], ks[few]]]
    n_rows += len(few)
    L = p.limits.matrix
    b = np.concatenate([-g_demand, np.zeros(K * R), b_extra, np.zeros(len(few))])
    if len(L):
        lr, lk = np.nonzero(L[:, keep])
        rows.append(n_rows + lr)
        cols.append(lk)
        vals.append(L[:, keep][lr, lk])
        b = np.concatenate([b, head])
        n_rows += L.shape[0]
    A = sp.csc_array(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n_rows, K + n)
    )
    res = lp(np.concatenate([p.obj[keep], np.zeros(n)]), A_ub=A, b_ub=b, bounds=(0, None))
    if res.status != 0:
        return None
    sol = np.asarray(res.x)
    g_pods = np.zeros((K, G))
    g_pods[ks, gs] = sol[K:]
    share = np.where(members, demand / np.maximum(g_demand[np.maximum(group, 0)], 1), 0)
    pods = g_pods[:, np.maximum(group, 0)] * share[None, :]
    # the bound: the covering and node-count duals, capacity priced for every candidate at
    # the resource prices (scaled) or, for the candidates solved, at this LP's own duals
    dual = -np.asarray(res.ineqlin.marginals)
    v_keep = np.zeros_like(p.cap, dtype=float)
    v_keep[keep] = np.maximum(dual[G:base], 0).reshape(K, R)
    prices = np.stack([v_keep] + [np.broadcast_to(lam * a, p.cap.shape) for a in PRICE_SCALES])
    node_rows = np.array([p.allowed_rows[u] for u in sorted(need)], float).reshape(
        len(need), len(p.obj)
    )
    bound, ratio = covering_dual_bound(
        p.obj,
        p.cap.astype(float),
        p.size[rep].astype(float),
        fit_all,
        g_demand,
        np.maximum(dual[:G], 0),
        node_rows,
        np.array([need[u] for u in sorted(need)], float),
        np.maximum(dual[base : base + len(need)], 0),
        prices,
    )
    return FluidSolution(sol[:K], pods, bound, ratio)


def _pack(p: Problem, pack: Packing, j: int, count: int, take: np.ndarray) -> np.ndarray:
    """Open ``count`` nodes of candidate ``j`` and share ``take`` (pods per class) over them
    evenly, capped classes first, then the largest pods. Returns the pods placed per class."""
    rows = pack.open(j, count)
    idx = np.arange(rows.start, rows.stop)
    capped = p.upper < p.demand
    weight = (p.size / p.capref).sum(axis=1)
    order = np.lexsort((-weight, ~capped))
    placed = np.zeros(p.n_classes, np.int64)
    for c in order[take[order] > 0].tolist():
        size = p.size[c]
        nz = size > 0
        free = p.cap[j][nz] - pack.used[idx][:, nz]
        q = np.floor_divide(free, size[nz]).min(axis=1)
        q = np.maximum(np.minimum(q, p.fit[c, j] - pack.counts[idx, c]), 0)
        load = (pack.used[idx] / np.maximum(p.cap[j], 1)).sum(axis=1)
        shares = even_shares(q, int(take[c]), load)
        pack.add(idx, c, shares)
        placed[c] = int(shares.sum())
    return placed


Solves = dict[bytes, FluidSolution | None]
"""Fluid LP solves of one plan by their input (candidates, demand, headroom), for reuse."""


def _solve(
    p: Problem,
    keep: np.ndarray,
    need: np.ndarray,
    head: np.ndarray,
    lam: np.ndarray,
    solves: Solves,
) -> FluidSolution | None:
    """:func:`fluid_lp`, or its earlier solve of the same input (``lam`` is fixed per plan)."""
    key = b"|".join((keep.tobytes(), need.tobytes(), head.tobytes()))
    if key not in solves:
        solves[key] = fluid_lp(p, keep, need, head, lam)
    return solves[key]


def fluid_packing(
    p: Problem,
    lam: np.ndarray,
    budget: PlanBudget,
    net: SafetyNet,
    solves: Solves | None = None,
) -> tuple[Packing | None, float]:
    """Nodes and pods from the fluid LP (see the module docstring) within ``budget``
    (``fluid_passes`` LP solves over the candidates within ``fluid_slack`` of the frontier),
    and the first solve's lower bound on plans that cover every pod (0 without one). The
    packing is None when the first solve fails, there are no passes, or more than
    ``fluid_candidates`` candidates are that close (:func:`frontier`). Pods may be left
    uncovered (the caller fills them in)."""
    if budget.fluid_passes <= 0:
        return None, 0.0
    keep = frontier(p, lam, budget.fluid_slack, budget.fluid_candidates)
    if keep is None:
        return None, 0.0
    solves = {} if solves is None else solves
    pack = Packing(p)
    need = p.demand.copy()
    bound = 0.0
    for i in range(budget.fluid_passes):
        if net.fired():
            break
        solved = _solve(p, keep, need, pack.head, lam, solves)
        for _ in range(budget.fluid_pricing if i == 0 else 0):
            # candidates the duals value above their price join, and the LP is solved again
            if solved is None or net.fired():
                break
            joins = np.flatnonzero(solved.ratio > 1 + RATIO_TOL)
            joins = joins[~np.isin(joins, keep)]
            if not len(joins):
                break
            keep = np.union1d(keep, joins)
            solved = _solve(p, keep, need, pack.head, lam, solves)
        if solved is None:
            return (None if pack.n == 0 else pack), bound
        y, pods = solved.y, solved.pods
        if i == 0:
            bound = solved.bound
        whole = np.floor(y + 1e-6).astype(np.int64)
        if not whole.any():  # only fractions left: the largest the limits allow becomes a node
            allowed = np.where(pack.rooms()[keep] > 0, y, 0.0)
            if not (allowed > 1e-9).any():
                break  # the caller's greedy places what the limits allow
            whole[int(np.argmax(allowed))] = 1
        share = pods * np.where(y > 1e-9, whole / np.maximum(y, 1e-9), 0)[:, None]
        take = np.minimum(
            np.floor(share + 1e-9).astype(np.int64), whole[:, None] * p.fit[:, keep].T
        )
        for k in np.flatnonzero(whole).tolist():
            want = np.minimum(take[k], need)
            need -= _pack(p, pack, int(keep[k]), int(whole[k]), want)
        fill(p, pack, need, "spread", open_new=False)  # what fits in the room left
        if i == 0:  # later passes: the candidates this solve used, and each class's cheapest
            keep = np.union1d(keep[y > 1e-9], _cheapest(p))
        if not need.any():
            break
    pack.compact()
    return pack, bound
