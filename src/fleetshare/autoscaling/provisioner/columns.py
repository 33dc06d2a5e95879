"""Column generation: the master LP over node patterns (HiGHS via scipy), knapsack pricing for
every candidate at once (greedy fills, then one block LP of all knapsacks), LP rounding and
decoding columns into a packing, and the MILP over the generated columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint

from fleetshare.autoscaling.provisioner.bound import lower_bound
from fleetshare.autoscaling.provisioner.budget import PlanBudget, SafetyNet
from fleetshare.autoscaling.provisioner.knapsack import exact_pricing
from fleetshare.autoscaling.provisioner.packing import Packing
from fleetshare.autoscaling.provisioner.problem import Problem
from fleetshare.autoscaling.provisioner.solver import lp, mip

SMALL = 60
"""Problems with at most this many classes may use the MILP."""


@dataclass
class Columns:
    cand: list[int] = field(default_factory=list)
    rows: list[np.ndarray] = field(default_factory=list)
    vals: list[np.ndarray] = field(default_factory=list)
    seen: set[tuple[int, bytes]] = field(default_factory=set)

    def add(self, j: int, pattern: np.ndarray) -> bool:
        idx = np.flatnonzero(pattern)
        if not len(idx):
            return False
        key = (j, idx.tobytes() + pattern[idx].astype(np.int64).tobytes())
        if key in self.seen:
            return False
        self.seen.add(key)
        self.cand.append(j)
        self.rows.append(idx)
        self.vals.append(pattern[idx].astype(float))
        return True

    def __len__(self) -> int:
        return len(self.cand)


def _master(p: Problem, cols: Columns) -> tuple[np.ndarray, sp.csc_array, np.ndarray, Bounds]:
    """Objective, constraint matrix (covering rows as >=, limits as <=), lower row bounds,
    variable layout: columns, then slack per non-gang class, then one variable per gang."""
    C, n = p.n_classes, len(cols)
    free_classes = np.flatnonzero(p.class_gang < 0)
    n_var = n + len(free_classes) + len(p.gangs)
    lens = np.array([len(r) for r in cols.rows], np.int64)
    r_idx = np.concatenate([*cols.rows, free_classes, np.flatnonzero(p.class_gang >= 0)])
    c_idx = np.concatenate(
        [
            np.repeat(np.arange(n), lens),
            n + np.arange(len(free_classes)),
            n + len(free_classes) + p.class_gang[p.class_gang >= 0],
        ]
    )
    vals = np.concatenate(
        [*cols.vals, np.ones(len(free_classes)), p.demand[p.class_gang >= 0].astype(float)]
    )
    K = len(p.limits)
    if K:
        Lc = p.limits.matrix[:, cols.cand]
        lr, lc = np.nonzero(Lc)
        r_idx = np.concatenate([r_idx, C + lr])
        c_idx = np.concatenate([c_idx, lc])
        vals = np.concatenate([vals, Lc[lr, lc]])
    A = sp.csc_array((vals, (r_idx, c_idx)), shape=(C + K, n_var))
    gang_pods = np.array([p.demand[p.class_gang == g].sum() for g in range(len(p.gangs))], float)
    cost = np.concatenate(
        [p.obj[cols.cand], np.full(len(free_classes), p.penalty), p.penalty * gang_pods]
    )
    return cost, A, p.limits.headroom.astype(float), Bounds(0, np.inf)


def _solve_lp(
    p: Problem, cols: Columns, demand: np.ndarray | None = None, head: np.ndarray | None = None
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray] | None:
    """The master LP (for ``demand`` and limit ``head``room, default the problem's): value,
    column values, covering duals (>= 0), limit duals (>= 0)."""
    cost, A, full_head, _ = _master(p, cols)
    C = p.n_classes
    A = A.tocsr()
    A_ub = sp.vstack([-A[:C], A[C:]]).tocsc()
    demand = p.demand if demand is None else demand
    head = full_head if head is None else head
    b_ub = np.concatenate([-demand.astype(float), head])
    res = lp(cost, A_ub=A_ub, b_ub=b_ub, bounds=(0, None))
    if res.status != 0:
        return None
    duals = -np.asarray(res.ineqlin.marginals)
    return (
        float(res.fun),
        np.asarray(res.x)[: len(cols)],
        np.maximum(duals[:C], 0),
        np.maximum(duals[C:], 0),
    )


def _greedy_fill(p: Problem, order: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """Patterns (J x C): every candidate, from ``start`` (or empty), takes classes in its own
    order (``order``: J x K class indices), each as often as it still fits."""
    J = p.cap.shape[0]
    patterns = np.zeros((J, p.n_classes), np.int64) if start is None else start.copy()
    rem = p.cap - patterns @ p.size
    rows = np.arange(J)
    for t in range(order.shape[1]):
        c = order[:, t]
        size = p.size[c]  # J x R
        q = np.where(size > 0, rem // np.maximum(size, 1), np.iinfo(np.int64).max).min(axis=1)
        q = np.minimum(q, p.fit[c, rows] - patterns[rows, c])
        patterns[rows, c] += q
        rem -= q[:, None] * size
    return patterns


def _price_lp(p: Problem, pi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every candidate's knapsack as an LP (one block LP for all): the LP values (an upper
    bound on each knapsack), and patterns from rounding the LP solution down and filling the
    rest greedily (dual per share of capacity). Returns upper bounds, values and patterns."""
    J, R = p.cap.shape
    active = pi > 1e-9
    cs, js = np.nonzero((p.fit > 0) & active[:, None])
    patterns = np.zeros((J, p.n_classes), np.int64)
    if not len(cs):
        return np.zeros(J), np.zeros(J), patterns
    n = len(cs)
    rows = (js[:, None] * R + np.arange(R)[None, :]).ravel()
    cols = np.repeat(np.arange(n), R)
    vals = p.size[cs].astype(float).ravel()
    A = sp.csc_array((vals, (rows, cols)), shape=(J * R, n))
    res = lp(
        -pi[cs],
        A_ub=A,
        b_ub=p.cap.astype(float).ravel(),
        bounds=np.stack([np.zeros(n), p.fit[cs, js].astype(float)], axis=1),
    )
    if res.status != 0:
        return np.full(J, np.inf), np.zeros(J), patterns
    x = np.asarray(res.x)
    upper = np.bincount(js, weights=pi[cs] * x, minlength=J)
    patterns[js, cs] = np.floor(x + 1e-7).astype(np.int64)
    idx = np.flatnonzero(active)
    share = p.size[idx][None, :, :] / np.maximum(p.cap[:, None, :], 1)
    order = idx[np.argsort(-(pi[idx][None, :] / share.sum(axis=2)), axis=1, kind="stable")]
    patterns = _greedy_fill(p, order, patterns)
    return np.maximum(upper, patterns @ pi), patterns @ pi, patterns


def _price_greedy(p: Problem, pi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Greedy knapsacks for every candidate at once; the best of a few class orders per
    candidate: dual per share of the candidate's capacity (summed over resources, and of its
    scarcest resource), and dual alone. Returns values (J) and patterns (J x C)."""
    active = np.flatnonzero(pi > 1e-9)
    J = p.cap.shape[0]
    best_v = np.full(J, -1.0)
    best_a = np.zeros((J, p.n_classes), np.int64)
    if not len(active):
        return np.zeros(J), best_a
    share = p.size[active][None, :, :] / np.maximum(p.cap[:, None, :], 1)  # J x A x R
    piv = pi[active][None, :]
    for key in (share.sum(axis=2), share.max(axis=2), None):
        dens = np.broadcast_to(piv, (J, len(active))) if key is None else piv / key
        order = active[np.argsort(-dens, axis=1, kind="stable")]
        patterns = _greedy_fill(p, order)
        values = patterns @ pi
        better = values > best_v
        best_v = np.where(better, values, best_v)
        best_a[better] = patterns[better]
    return best_v, best_a


@dataclass
class Relaxation:
    value: float = 0.0
    bound: float = 0.0
    exact: bool = False
    y: np.ndarray = field(default_factory=lambda: np.zeros(0))
    rounds: int = 0
    knapsacks: int = 0
    pi: np.ndarray = field(default_factory=lambda: np.zeros(0))
    mu: np.ndarray = field(default_factory=lambda: np.zeros(0))


def column_generation(
    p: Problem,
    cols: Columns,
    budget: PlanBudget,
    net: SafetyNet,
    bound_res: float,
    pi_res: np.ndarray,
) -> Relaxation:
    """Column generation within ``budget`` (rounds, columns, LP pricings): the master LP's
    value and solution, and the best lower bound.

    A round prices every candidate greedily; when that finds no improving column, every
    knapsack is solved as an LP (:func:`_price_lp`), whose values bound the knapsacks (a
    Farley bound on the master) and whose rounded solutions are new columns; the knapsacks
    whose LP value bounds the Farley ratio are then solved exactly
    (:func:`~fleetshare.autoscaling.provisioner.knapsack.exact_pricing`), which tightens the
    bound. The bound holds at every round, however early generation stops."""
    out = Relaxation(bound=bound_res)
    per_round = min(budget.cg_per_round, max(40, budget.cg_round_work // p.n_classes))
    pairs = int((p.fit > 0).sum())
    lp_left = budget.lp_pricings if pairs <= budget.lp_pricing_pairs else 0
    exact_left = budget.exact_pricings
    tol = 1e-9 * max(1.0, float(p.obj.max()))
    pi = mu = np.zeros(0)
    for _ in range(budget.cg_rounds):
        if len(cols) > budget.cg_columns or net.fired():
            break
        out.rounds += 1
        solved = _solve_lp(p, cols)
        if solved is None:
            break
        out.value, out.y, pi, mu = solved
        out.pi, out.mu = pi, mu
        reduced_base = p.obj + (mu @ p.limits.matrix if len(p.limits) else 0.0)
        for alpha in (budget.cg_smoothing, 0.0):
            # price at duals between the resource prices and the LP's (Wentges smoothing):
            # the LP's duals swing from round to round, the resource prices are nearly optimal
            _, patterns = _price_greedy(p, alpha * pi_res + (1 - alpha) * pi)
            values = patterns @ pi
            if (reduced_base - values < -tol).any():
                break
        found = (reduced_base - values < -tol).any()
        if (budget.lp_pricing_always or not found) and lp_left > 0:
            lp_left -= 1
            upper, lp_values, lp_patterns = _price_lp(p, pi)
            if exact_left > 0:
                exact_left -= exact_pricing(
                    p, pi, reduced_base, upper, lp_patterns, exact_left, budget.knapsack_nodes
                )
                out.knapsacks = budget.exact_pricings - exact_left
            out.bound = max(out.bound, lower_bound(p, out.value, pi, mu, upper))
            lp_values = lp_patterns @ pi
            better = lp_values > values if found else np.ones(len(values), bool)
            values = np.where(better, lp_values, values)
            patterns = np.where(better[:, None], lp_patterns, patterns)
            if out.value - out.bound <= budget.cg_gap * max(out.value, 1e-12):
                break
        rc = reduced_base - values
        improving = np.flatnonzero(rc < -tol)
        order = improving[np.argsort(rc[improving] / p.obj[improving], kind="stable")]
        if not sum(cols.add(int(j), patterns[j]) for j in order[:per_round]):
            break
    if out.value > 0:
        out.bound = min(out.bound, out.value)
        out.exact = out.bound >= out.value * (1 - budget.cg_gap)
    return out


def decode(p: Problem, cols: Columns, y: np.ndarray) -> Packing:
    """Nodes for integer column values, pods assigned up to each class's demand."""
    pack = Packing(p)
    need = p.demand.copy()
    for col, count in enumerate(np.round(y).astype(np.int64)):
        if count <= 0:
            continue
        rows = pack.open(cols.cand[col], int(count))
        for c, v in zip(cols.rows[col], cols.vals[col], strict=True):
            per = np.full(rows.stop - rows.start, int(v), np.int64)
            before = np.cumsum(per) - per
            take = np.clip(need[c] - before, 0, per)
            if take.any():
                pack.add(rows, int(c), take)
                need[c] -= int(take.sum())
    pack.compact()
    return pack


def round_columns(p: Problem, cols: Columns, y: np.ndarray, passes: int) -> Packing:
    """An integer plan from the master LP's solution ``y``: take the whole nodes (y rounded
    down), solve the master LP again for the pods still uncovered and repeat, at most
    ``passes`` times; then round up, one node of each column the last solution uses (most
    used first) while its pods are still needed. Nodes carry only pods still needed (the
    caller right-sizes them)."""
    pack = Packing(p)
    need = p.demand.copy()
    y = np.concatenate([y, np.zeros(len(cols) - len(y))])  # columns newer than the solve
    for _ in range(passes):
        whole = np.floor(y + 1e-6)
        if whole.any():
            _take(pack, cols, whole, need)
        if not need.any():
            return pack
        solved = _solve_lp(p, cols, need, pack.head)
        if solved is None:
            return pack
        y = solved[1]
        if not np.floor(y + 1e-6).any():
            break
    for k in np.argsort(-y, kind="stable"):
        if y[k] <= 1e-9 or not need.any():
            break
        if pack.rooms()[cols.cand[k]] == 0:
            continue
        one = np.zeros(len(y))
        one[k] = 1
        _take(pack, cols, one, need)
    return pack


def _take(pack: Packing, cols: Columns, counts: np.ndarray, need: np.ndarray) -> None:
    """Open ``counts[k]`` nodes of every column k, each with the column's pods while ``need``
    (reduced in place) asks for them and the limit rows allow; nodes left empty are not
    opened."""
    for k in np.flatnonzero(counts > 0):
        n = min(int(counts[k]), int(pack.rooms()[cols.cand[k]]))
        rows_c, vals = cols.rows[k], cols.vals[k].astype(np.int64)
        per = np.minimum(vals[None, :], 0).repeat(n, axis=0)
        for i in range(n):
            per[i] = np.minimum(vals, need[rows_c])
            need[rows_c] -= per[i]
            if not per[i].any():
                per = per[:i]
                break
        if not len(per):
            continue
        rows = pack.open(cols.cand[k], len(per))
        for col, c in enumerate(rows_c):
            pack.add(rows, int(c), per[:, col])


def milp_columns(p: Problem, cols: Columns, relax: Relaxation, most: int) -> Columns:
    """The columns the MILP chooses from: those the LP uses, then the lowest reduced costs
    (ties: generation order), at most ``most``."""
    if len(cols) <= most or not relax.pi.size:
        return cols
    cand = np.asarray(cols.cand, np.int64)
    used = np.array([float(relax.pi[r] @ v) for r, v in zip(cols.rows, cols.vals, strict=True)])
    rc = p.obj[cand] - used
    if len(p.limits) and relax.mu.size:
        rc = rc + relax.mu @ p.limits.matrix[:, cand]
    y = np.zeros(len(cols))
    y[: len(relax.y)] = relax.y  # columns added after the last LP solve have no value yet
    rc = np.where(y > 1e-9, -np.inf, rc)
    keep = np.sort(np.argsort(rc, kind="stable")[:most])
    out = Columns()
    for k in keep.tolist():
        out.cand.append(cols.cand[k])
        out.rows.append(cols.rows[k])
        out.vals.append(cols.vals[k])
    return out


def solve_milp(p: Problem, cols: Columns, nodes: int, net: SafetyNet) -> np.ndarray | None:
    """The master problem in integers over ``cols`` (HiGHS, at most ``nodes``
    branch-and-bound nodes): the best column counts found, or None."""
    cost, A, head, bounds = _master(p, cols)
    C = p.n_classes
    A = A.tocsr()
    constraints = [LinearConstraint(A[:C], p.demand.astype(float), np.inf)]
    if len(p.limits):
        constraints.append(LinearConstraint(A[C:], -np.inf, head))
    n_free = int((p.class_gang < 0).sum())
    integrality = np.concatenate([np.ones(len(cols)), np.zeros(n_free), np.ones(len(p.gangs))])
    res = mip(
        c=cost,
        constraints=constraints,
        integrality=integrality,
        bounds=bounds,
        options={"node_limit": nodes, "mip_rel_gap": 1e-3},
    )
    if res.x is None:
        return None
    return np.asarray(res.x)[: len(cols)]


def add_singletons(p: Problem, cols: Columns) -> None:
    """Every class gets a column of its own (its cheapest node per pod)."""
    for c in range(p.n_classes):
        per_pod = np.where(
            p.fit[c] > 0, p.obj / np.maximum(np.minimum(p.fit[c], p.demand[c]), 1), np.inf
        )
        j = int(np.argmin(per_pod))
        if np.isfinite(per_pod[j]):
            pattern = np.zeros(p.n_classes, np.int64)
            pattern[c] = min(int(p.fit[c, j]), int(p.demand[c]))
            cols.add(j, pattern)
