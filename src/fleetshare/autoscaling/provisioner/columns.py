"""Column generation: the master LP over node patterns (HiGHS via scipy), knapsack pricing for
every candidate at once (greedy fills, then exact small MILPs), decoding columns into a
packing, and the MILP over the generated columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint

from fleetshare.autoscaling.provisioner.bound import knapsack_upper, lower_bound
from fleetshare.autoscaling.provisioner.budget import PlanBudget, SafetyNet
from fleetshare.autoscaling.provisioner.packing import Packing
from fleetshare.autoscaling.provisioner.problem import Problem
from fleetshare.autoscaling.provisioner.solver import lp, mip

CG_GAP = 0.002
"""Column generation stops once the LP value is this close to the lower bound."""


SMALL = 60
"""Problems with at most this many classes get exact knapsack pricing and may use the MILP."""


COLUMNS_PER_ROUND = 40


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


def _solve_lp(p: Problem, cols: Columns) -> tuple[float, np.ndarray, np.ndarray, np.ndarray] | None:
    """The master LP: value, column values, covering duals (>= 0), limit duals (>= 0)."""
    cost, A, head, _ = _master(p, cols)
    C = p.n_classes
    A = A.tocsr()
    A_ub = sp.vstack([-A[:C], A[C:]]).tocsc()
    b_ub = np.concatenate([-p.demand.astype(float), head])
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


def _price_greedy(p: Problem, pi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Greedy knapsacks for every candidate at once; the best of a few class orders (dual per
    normalised size, per dominant normalised size, and dual alone) per candidate. Each class
    is taken as often as it still fits. Returns values (J) and patterns (J x C)."""
    active = np.flatnonzero(pi > 1e-9)
    norm = p.size[active] / p.capref
    best_v = np.full(p.cap.shape[0], -1.0)
    best_a = np.zeros((p.cap.shape[0], p.n_classes), np.int64)
    for key in (norm.sum(axis=1), norm.max(axis=1), None):
        dens = pi[active] if key is None else pi[active] / np.maximum(key, 1e-300)
        patterns = np.zeros_like(best_a)
        rem = p.cap.copy()
        for c in active[np.argsort(-dens, kind="stable")]:
            size = p.size[c]
            nz = size > 0
            q = np.minimum(np.floor_divide(rem[:, nz], size[nz]).min(axis=1), p.fit[c])
            if q.any():
                patterns[:, c] = q
                rem -= q[:, None] * size[None, :]
        values = patterns @ pi
        better = values > best_v
        best_v = np.where(better, values, best_v)
        best_a[better] = patterns[better]
    return best_v, best_a


def _knapsack_exact(
    p: Problem, pi: np.ndarray, j: int, nodes: int, net: SafetyNet
) -> tuple[float, np.ndarray, bool]:
    """max pi·a s.t. sizes·a <= cap_j, 0 <= a <= fit_j, integer (a small MILP of at most
    ``nodes`` branch-and-bound nodes). Returns the value, the pattern and whether it is
    proven optimal."""
    idx = np.flatnonzero((p.fit[:, j] > 0) & (pi > 1e-12))
    a = np.zeros(p.n_classes, np.int64)
    if not len(idx):
        return 0.0, a, True
    res = mip(
        c=-pi[idx],
        constraints=LinearConstraint(p.size[idx].T.astype(float), -np.inf, p.cap[j].astype(float)),
        integrality=np.ones(len(idx)),
        bounds=Bounds(0, p.fit[idx, j].astype(float)),
        options={"node_limit": nodes, "time_limit": net.left()},
    )
    if res.x is None:
        return 0.0, a, False
    a[idx] = np.round(res.x).astype(np.int64)
    return float(pi @ a), a, res.status == 0


@dataclass
class Relaxation:
    value: float = 0.0
    bound: float = 0.0
    exact: bool = False
    y: np.ndarray = field(default_factory=lambda: np.zeros(0))
    rounds: int = 0
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
    """Column generation within ``budget`` (rounds, columns, exact knapsacks and their
    branch-and-bound nodes): the master LP's value and solution, and the best lower bound."""
    out = Relaxation(bound=bound_res)
    exact_left = budget.exact_knapsacks
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
        values, patterns = _price_greedy(p, pi)
        rc = reduced_base - values
        improving = np.flatnonzero(rc < -tol)
        order = improving[np.argsort(rc[improving] / p.obj[improving], kind="stable")]
        added = sum(cols.add(int(j), patterns[j]) for j in order[:COLUMNS_PER_ROUND])
        if added:
            continue
        # no greedy column: bound the knapsacks, solve the most promising ones exactly
        upper = np.maximum(knapsack_upper(p, pi), values)
        out.bound = max(out.bound, lower_bound(p, out.value, pi, mu, upper))
        if out.value - out.bound <= CG_GAP * max(out.value, 1e-12):
            break
        suspects = np.flatnonzero(upper - reduced_base > tol)
        suspects = suspects[
            np.argsort(-(upper[suspects] - reduced_base[suspects]) / p.obj[suspects], kind="stable")
        ]
        proven = True
        for j in suspects.tolist():
            if exact_left <= 0 or net.fired():
                proven = False
                break
            exact_left -= 1
            value, pattern, optimal = _knapsack_exact(p, pi, j, budget.knapsack_nodes, net)
            if reduced_base[j] - value < -tol and cols.add(j, pattern):
                added += 1
                break  # a new column: solve the master again before more exact pricing
            elif optimal:
                upper[j] = value
            else:
                proven = False
        if not added:
            out.exact = proven
            out.bound = (
                out.value if proven else max(out.bound, lower_bound(p, out.value, pi, mu, upper))
            )
            break
    if pi.size and not out.exact:  # mix the LP duals with the resource prices
        for alpha in (0.9, 0.75, 0.5, 0.25):
            pim, mum = alpha * pi + (1 - alpha) * pi_res, alpha * mu
            z = alpha * out.value + (1 - alpha) * bound_res
            out.bound = max(out.bound, lower_bound(p, z, pim, mum, knapsack_upper(p, pim)))
    if out.value > 0:
        out.bound = min(out.bound, out.value)
        out.exact = out.exact or out.bound >= out.value * (1 - 1e-9)
    return out


def decode(p: Problem, cols: Columns, y: np.ndarray) -> Packing:
    """Nodes for integer column values, pods assigned up to each class's demand."""
    pack = Packing(p)
    need = p.demand.copy()
    for col, count in enumerate(np.round(y).astype(np.int64)):
        if count <= 0:
            continue
        rows = pack.open(cols.cand[col], int(count))
        start = rows.start
        for c, v in zip(cols.rows[col], cols.vals[col], strict=True):
            per = np.full(int(count), int(v), np.int64)
            before = np.cumsum(per) - per
            take = np.clip(need[c] - before, 0, per)
            if take.any():
                pack.add(slice(start, start + int(count)), int(c), take)
                need[c] -= int(take.sum())
    pack.compact()
    return pack


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
        options={"node_limit": nodes, "mip_rel_gap": 1e-3, "time_limit": net.left()},
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
