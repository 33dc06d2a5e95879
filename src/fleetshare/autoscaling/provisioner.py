"""Choose the cheapest set of new nodes for pending pods (pure decision functions).

The problem is variable-sized bin packing with prices, zones and limits. Pods are grouped into
*shapes* (same requests and constraints, :class:`PodShape`); a zone-constrained shape becomes one
*item* per zone (``topology.py``); items that pack identically (same requests, same allowed
nodes, no per-node cap, same gang) are merged into *classes*. A *candidate* is one way to buy a
node: a pool, an instance type and an offering (zone, capacity type, price), or a capacity
reservation. Candidates another candidate dominates (allowed for at least the same items, at
least as large in every resource, no dearer, using no more of any limit) are dropped. Limits —
node-pool limits, account vCPU quotas, per-type counts, reservations (``account_limits.py``) —
are rows ``L y <= headroom`` over the candidates that no plan exceeds.

1. Greedy plans, three ways of opening a node: cheapest per pod of the class (``pod``), most
   capacity per dollar with first fit (``big``), and most capacity per dollar with every class
   shared evenly over the open nodes, odd pods going where their own resources are least used
   (``spread``: balanced nodes, the best rule for large mixed batches). Every node is then
   *right-sized* to the cheapest candidate that still holds its pods.
2. Local search on the best greedy plan: move a node to the next cheaper candidate (or empty
   it) when the pods that no longer fit find room on other nodes.
3. A lower bound: the best *resource prices* (``lam·cap_j <= price_j`` for every candidate, so
   ``pi_c = lam·size_c`` is a feasible dual of the master LP below) times the demand. It is a
   valid bound on the LP optimum, hence on any plan.
4. When the plan is not within ``target_gap`` of the bound (and always for small problems):
   column generation. The master LP (HiGHS via scipy) covers every class's pods at least cost;
   pods left uncovered pay a penalty above any node's price, so limits and gangs (one "gang
   not planned" variable per gang) never make it infeasible. Its duals price a knapsack per
   candidate, solved for all candidates at once by vectorised greedy fills (three class
   orders) and, when those find nothing, exactly (small MILPs) for the candidates whose
   knapsack upper bound (fractional surrogate relaxations) leaves room. The bound improves by
   Farley's scaling of the duals (candidates capped by a limit row get a Lagrangian term) and
   mixing them with the resource prices; with exact pricing it is the LP optimum. The LP
   solution rounded down and repaired by the greedy, and on small problems a MILP over the
   generated columns (time limit), compete with the greedy plan (pods covered first, then
   cost), then the local search runs again.
5. Topology checks on the winner: a zone spread that fell short in a zone (limits) is trimmed so
   the skew stays at most 1; a gang not placed in full is removed entirely; nodes are right-sized
   again. Pods left out get a reason naming the limit that blocks them.

``Plan.nodes`` lists every planned node with the pods assigned to it, so a plan can be checked
independently; ``Plan.launches`` aggregates them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

from fleetshare.autoscaling.account_limits import (
    AccountLimits,
    LimitRows,
    account_usage,
    describe_row,
    limit_rows,
    reservation_offerings,
)
from fleetshare.autoscaling.cloud import Instance, Offering
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.topology import (
    Item,
    PodShape,
    gang_members,
    split_items,
    spread_cap,
)
from fleetshare.model.catalog import Catalog, InstanceType, ec2_name
from fleetshare.model.node import INSTANCE_TYPE_LABEL, ZONE_LABEL, Taint
from fleetshare.model.resources import GPU, is_accelerator
from fleetshare.placement.predicate import may_run_on

__all__ = [
    "CAPACITY_TYPE_LABEL",
    "FAMILY_LABEL",
    "GPU_NAME_LABEL",
    "POOL_LABEL",
    "AccountLimits",
    "Candidate",
    "Launch",
    "Plan",
    "PlannedNode",
    "PodShape",
    "candidates_for",
    "compatible",
    "node_labels",
    "plan_nodes",
]

FAMILY_LABEL = "karpenter.k8s.aws/instance-family"
GPU_NAME_LABEL = "karpenter.k8s.aws/instance-gpu-name"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
POOL_LABEL = "karpenter.sh/nodepool"

ILP_GAP = 0.01
"""The MILP runs when the rounded LP plan is further than this from the lower bound."""
CG_GAP = 0.002
"""Column generation stops once the LP value is this close to the lower bound."""
SMALL = 60
"""Problems with at most this many classes get exact knapsack pricing and may use the MILP."""
SMALL_PROBLEM = 20_000
"""Problems with at most this many (class, candidate) pairs always run column generation."""
COLUMNS_PER_ROUND = 40


@dataclass(frozen=True, slots=True)
class Candidate:
    """An instance type a pool may launch, at one offering (or in a capacity reservation)."""

    pool: str
    instance: InstanceType
    offering: Offering
    reservation: str | None = None

    @property
    def price(self) -> float:
        return self.offering.price_per_hour


@dataclass(frozen=True, slots=True)
class Launch:
    """Launch ``count`` nodes of one offering for a pool."""

    pool: str
    instance_type: str
    zone: str
    capacity_type: str
    count: int
    price_per_hour: float


@dataclass(frozen=True, slots=True)
class PlannedNode:
    """One planned node and the pods meant for it: (shape index, pod count) pairs."""

    pool: str
    instance_type: str
    zone: str
    capacity_type: str
    price_per_hour: float
    pods: tuple[tuple[int, int], ...]
    reservation: str | None = None


@dataclass
class Plan:
    """What to launch, what it costs, how good it is, and which pods cannot be helped."""

    launches: list[Launch] = field(default_factory=list)
    hourly_cost: float = 0.0
    lower_bound: float = 0.0
    bound_is_proven: bool = False
    method: str = "none"
    unplaceable: dict[int, str] = field(default_factory=dict)
    """Shape index -> why (some of) its pods are not planned."""
    seconds: float = 0.0
    nodes: list[PlannedNode] = field(default_factory=list)
    """Every planned node with its pods (``launches`` aggregates these)."""
    stats: dict[str, float] = field(default_factory=dict)
    """Solver figures: classes, candidates, columns, rounds, lp_value, ..."""

    @property
    def gap(self) -> float:
        """Relative gap to the lower bound (0 when both are 0)."""
        if self.lower_bound <= 0:
            return 0.0
        return (self.hourly_cost - self.lower_bound) / self.lower_bound


# -- which candidates can run which shapes ----------------------------------------------------


def launch_labels(
    pool: NodePool, inst: InstanceType, zone: str, capacity_type: str
) -> dict[str, str]:
    """Labels a node the pool launches carries: the pool's own and Karpenter's well-known
    ones (instance type, family, GPU name, capacity type, zone, pool)."""
    labels = dict(pool.labels)
    labels[INSTANCE_TYPE_LABEL] = inst.name
    labels[FAMILY_LABEL] = inst.family
    labels[CAPACITY_TYPE_LABEL] = capacity_type
    labels[ZONE_LABEL] = zone
    labels[POOL_LABEL] = pool.name
    if inst.gpu_name:
        labels[GPU_NAME_LABEL] = inst.gpu_name
    return labels


def pool_taints(pool: NodePool) -> tuple[Taint, ...]:
    """Taints a node the pool launches carries."""
    return tuple(Taint(t.key, t.value, t.effect) for t in pool.taints)


def node_labels(candidate: Candidate, pool: NodePool) -> dict[str, str]:
    """Labels a node launched for this candidate would carry."""
    offering = candidate.offering
    return launch_labels(pool, candidate.instance, offering.zone, offering.capacity_type)


def _fits_count(requests: Mapping[str, int], allocatable: Mapping[str, int]) -> int:
    count = math.inf
    for name, amount in requests.items():
        if amount > 0:
            count = min(count, allocatable.get(name, 0) // amount)
    return 0 if count == math.inf else int(count)


def _labels_ok(shape: PodShape, candidate: Candidate, pool: NodePool) -> bool:
    return may_run_on(
        node_labels(candidate, pool),
        pool_taints(pool),
        dict(shape.node_selector),
        shape.tolerations,
        shape.affinity,
    )


def compatible(shape: PodShape, candidate: Candidate, pool: NodePool) -> bool:
    """True when a pod of ``shape`` may run on a node of ``candidate``."""
    return _labels_ok(shape, candidate, pool) and (
        _fits_count(shape.request(), candidate.instance.allocatable) >= 1
    )


def _pool_offerings(
    pools: Sequence[NodePool], catalog: Catalog, offerings: Sequence[Offering]
) -> list[tuple[NodePool, InstanceType, list[Offering]]]:
    by_type: dict[str, list[Offering]] = {}
    for offering in offerings:
        if offering.available:
            by_type.setdefault(ec2_name(offering.instance_type), []).append(offering)
    out = []
    for pool in pools:
        for inst in catalog:
            if not pool.allows(inst):
                continue
            options = [
                o
                for o in by_type.get(inst.name, ())
                if o.capacity_type in pool.capacity_types
                and (not pool.zones or o.zone in pool.zones)
            ]
            if options:
                out.append((pool, inst, options))
    return out


def candidates_for(
    pools: Sequence[NodePool], catalog: Catalog, offerings: Sequence[Offering]
) -> list[Candidate]:
    """Per pool and instance type, the cheapest available offering the pool allows."""
    return [
        Candidate(
            pool.name, inst, min(opts, key=lambda o: (o.price_per_hour, o.zone, o.capacity_type))
        )
        for pool, inst, opts in _pool_offerings(pools, catalog, offerings)
    ]


def offering_candidates(
    pools: Sequence[NodePool],
    catalog: Catalog,
    offerings: Sequence[Offering],
    account: AccountLimits | None = None,
) -> list[Candidate]:
    """Per pool, instance type, zone and capacity type, the cheapest available offering; plus
    one candidate per capacity reservation and pool that may use it."""
    out: list[Candidate] = []
    for pool, inst, opts in _pool_offerings(pools, catalog, offerings):
        best: dict[tuple[str, str], Offering] = {}
        for o in opts:
            key = (o.zone, o.capacity_type)
            if key not in best or o.price_per_hour < best[key].price_per_hour:
                best[key] = o
        out.extend(Candidate(pool.name, inst, best[k]) for k in sorted(best))
    if account is not None:
        for reservation, offering in reservation_offerings(account):
            if offering.instance_type not in catalog:
                continue
            inst = catalog.get(offering.instance_type)
            for pool in pools:
                if (
                    "reserved" in pool.capacity_types
                    and pool.allows(inst)
                    and (not pool.zones or offering.zone in pool.zones)
                ):
                    out.append(Candidate(pool.name, inst, offering, reservation.id))
    return out


# -- the problem in arrays --------------------------------------------------------------------


@dataclass
class _Problem:
    shapes: Sequence[PodShape]
    candidates: list[Candidate]
    items: list[Item]
    class_items: list[list[int]]
    cap: np.ndarray  # J x R, int64 (resource units scaled by a common divisor)
    size: np.ndarray  # C x R, int64
    demand: np.ndarray  # C, int64
    upper: np.ndarray  # C, int64: per-node cap (demand when uncapped)
    allowed: np.ndarray  # C x J bool
    fit: np.ndarray  # C x J int64: how many of the class one node holds (0: not allowed)
    price: np.ndarray  # J: real price
    obj: np.ndarray  # J: objective price (>0 even for free reservations)
    limits: LimitRows
    class_gang: np.ndarray  # C int: gang index or -1
    gangs: list[str]
    weights: list[np.ndarray]  # surrogate weights per resource, >= 0
    capref: np.ndarray  # R: the largest capacity per resource (for normalised sizes)
    penalty: float
    accel: np.ndarray  # C: accelerator amount per pod (for ordering)
    item_class: np.ndarray  # I: class of each item
    domains: dict[int, list[str]]  # zone-spread shape -> the zones it may use
    allowed_id: np.ndarray  # C: index into allowed_rows
    allowed_rows: np.ndarray  # U x J: the distinct rows of ``allowed``

    @property
    def n_classes(self) -> int:
        return len(self.class_items)


def _scaled(values: list[list[int]]) -> np.ndarray:
    """Integer matrix with every column divided by the gcd of its entries (exact in floats)."""
    arr = np.array(values, dtype=object)
    out = np.zeros(arr.shape, dtype=np.int64)
    for r in range(arr.shape[1] if arr.ndim == 2 else 0):
        col = [int(v) for v in arr[:, r]]
        g = 0
        for v in col:
            g = math.gcd(g, v)
        g = g or 1
        out[:, r] = [v // g for v in col]
    return out


def _compat(
    shapes: Sequence[PodShape],
    candidates: list[Candidate],
    pools: Mapping[str, NodePool],
    fit: np.ndarray,
) -> np.ndarray:
    """S x J: labels, taints, resources and the pool's GPU fallback rule."""
    ok = np.zeros((len(shapes), len(candidates)), bool)
    cache: dict[tuple[object, ...], np.ndarray] = {}
    for s, shape in enumerate(shapes):
        key = (shape.node_selector, shape.tolerations, shape.affinity)
        if key not in cache:
            cache[key] = np.array(
                [_labels_ok(shape, c, pools[c.pool]) for c in candidates], dtype=bool
            )
        ok[s] = cache[key] & fit[s]
        if dict(shape.requests).get(GPU, 0) > 0 and ok[s].any():
            idx = np.flatnonzero(ok[s])
            if not all(pools[candidates[j].pool].allow_gpu_fallback for j in idx):
                counts = np.array([candidates[j].instance.gpu_count for j in idx])
                ok[s, idx[counts != counts.min()]] = False
    return ok


def _dominated(allowed: np.ndarray, cap: np.ndarray, obj: np.ndarray, L: np.ndarray) -> np.ndarray:
    """Candidates another one dominates: allowed for a superset of items, at least as large in
    every resource, no dearer and using no more of any limit (ties: the lower index stays)."""
    J = cap.shape[0]
    dead = np.zeros(J, bool)
    if J < 2:
        return dead
    packed = np.packbits(allowed.T, axis=1)
    ids: dict[bytes, int] = {}
    sig = np.array([ids.setdefault(row.tobytes(), len(ids)) for row in packed], np.int64)
    first = np.unique(sig, return_index=True)[1]
    colf = allowed.T[first].astype(np.int64)
    # superset[u, v]: column u allows everything column v allows
    superset = (colf @ (1 - colf).T) == 0
    superset = superset.T
    chunk = max(1, 2_000_000 // max(1, J * max(1, cap.shape[1])))
    for start in range(0, J, chunk):
        js = np.arange(start, min(J, start + chunk))
        # k dominates j
        m = superset[sig[None, :], sig[js, None]]  # len(js) x J: col(k) >= col(j)
        m &= (cap[None, :, :] >= cap[js, None, :]).all(axis=2)
        m &= obj[None, :] <= obj[js, None] + 1e-12
        if L.shape[0]:
            m &= (L.T[None, :, :] <= L.T[js, None, :] + 1e-9).all(axis=2)
        strict = (cap[None, :, :] > cap[js, None, :]).any(axis=2) | (
            obj[None, :] < obj[js, None] - 1e-12
        )
        if L.shape[0]:
            strict |= (L.T[None, :, :] < L.T[js, None, :] - 1e-9).any(axis=2)
        m &= strict | (np.arange(J)[None, :] < js[:, None])
        m[np.arange(len(js)), js] = False
        dead[js] = m.any(axis=1)
    return dead


def _build(
    shapes: Sequence[PodShape],
    pools: Sequence[NodePool],
    catalog: Catalog,
    offerings: Sequence[Offering],
    pool_usage: Mapping[str, Mapping[str, int]],
    account: AccountLimits | None,
    running: Sequence[Instance],
    plan: Plan,
) -> _Problem | None:
    pools_by_name = {p.name: p for p in pools}
    candidates = offering_candidates(pools, catalog, offerings, account)
    resources = sorted({name for s in shapes for name, _ in s.requests} | {"pods"})
    raw_size = [[s.request().get(r, 0) if r != "pods" else 1000 for r in resources] for s in shapes]
    raw_cap = [[c.instance.allocatable.get(r, 0) for r in resources] for c in candidates]
    both = _scaled(raw_size + raw_cap) if shapes and candidates else np.zeros((0, len(resources)))
    ssize, cap = both[: len(shapes)], both[len(shapes) :]
    S, J = len(shapes), len(candidates)
    fits: np.ndarray = np.zeros((S, J), bool)
    if S and J:
        fits = np.asarray((cap[None, :, :] >= ssize[:, None, :]).all(axis=2))
    compat = _compat(shapes, candidates, pools_by_name, fits) if J else np.zeros((S, 0), bool)
    placeable = [i for i, s in enumerate(shapes) if s.count > 0 and compat[i].any()]
    for i, s in enumerate(shapes):
        if s.count > 0 and not compat[i].any():
            plan.unplaceable[i] = _why_unplaceable(s, pools, catalog)
    gangs = gang_members(shapes)
    for gang, members in gangs.items():
        broken = [i for i in members if i in plan.unplaceable]
        if broken:
            for i in members:
                if shapes[i].count > 0 and i not in plan.unplaceable:
                    plan.unplaceable[i] = (
                        f"gang '{gang}' cannot be planned in full, so none of it is: shape "
                        f"{broken[0]}: {plan.unplaceable[broken[0]]}"
                    )
            placeable = [i for i in placeable if i not in members]
    if not placeable:
        return None
    price = np.array([c.price for c in candidates], float)
    zones = np.array([c.offering.zone for c in candidates])
    items: list[Item] = []
    zone_names = sorted(set(zones.tolist()))
    zone_mask = {z: zones == z for z in zone_names}
    domains: dict[int, list[str]] = {}
    for i in placeable:
        shape = shapes[i]
        zone_prices: dict[str, float] = {}
        if shape.zone_spread or shape.same_zone:
            per_node = np.floor_divide(cap, np.maximum(ssize[i], 1)).min(axis=1)
            per_node = np.minimum(per_node, min(shape.max_per_node or shape.count, shape.count))
            per_pod = np.where(compat[i], price / np.maximum(per_node, 1), np.inf)
            for z in zone_names:
                best = float(per_pod[zone_mask[z]].min(initial=np.inf))
                if np.isfinite(best):
                    zone_prices[z] = best
            domains[i] = sorted(zone_prices)
        items.extend(split_items(i, shape, zone_prices))
    item_allowed = np.array(
        [compat[it.shape] & ((zones == it.zone) if it.zone is not None else True) for it in items]
    )
    usage = account_usage(account, running, catalog) if account is not None else {}
    limits = limit_rows(candidates, pools, pool_usage, account, usage)
    # free capacity (reservations) costs a token amount, so no plan launches it for nothing
    obj = np.where(price > 0, price, 1e-6 * max(1.0, float(price.max(initial=0.0))))
    # same pool and type, same items, same limit use: only the cheapest offering matters
    cheapest: dict[tuple[object, ...], int] = {}
    packed = np.packbits(item_allowed.T, axis=1)
    for j in np.argsort(obj, kind="stable").tolist():
        c = candidates[j]
        same = (c.pool, c.instance.name, packed[j].tobytes(), limits.matrix[:, j].tobytes())
        cheapest.setdefault(same, j)
    keep = np.array(sorted(cheapest.values()), np.int64)
    dead = _dominated(item_allowed[:, keep], cap[keep], obj[keep], limits.matrix[:, keep])
    keep = keep[~dead]
    candidates = [candidates[j] for j in keep]
    cap, price, obj, item_allowed = cap[keep], price[keep], obj[keep], item_allowed[:, keep]
    limits.matrix = limits.matrix[:, keep]
    # merge items that pack identically into classes
    gang_names = sorted({it.gang for it in items if it.gang is not None})
    class_of: dict[tuple[object, ...], int] = {}
    class_items: list[list[int]] = []
    for k, it in enumerate(items):
        key = (
            it.shape if it.max_per_node is not None else None,
            shapes[it.shape].requests,
            item_allowed[k].tobytes(),
            it.gang,
        )
        if key not in class_of:
            class_of[key] = len(class_items)
            class_items.append([])
        class_items[class_of[key]].append(k)
    first = [members[0] for members in class_items]
    size = ssize[[items[k].shape for k in first]]
    demand = np.array([sum(items[k].count for k in members) for members in class_items], np.int64)
    upper = np.array(
        [min(int(d), items[k].max_per_node or int(d)) for k, d in zip(first, demand, strict=True)],
        np.int64,
    )
    allowed = item_allowed[first]
    fit = np.floor_divide(cap[None, :, :], np.maximum(size[:, None, :], 1))
    fit = np.where(size[:, None, :] > 0, fit, np.iinfo(np.int64).max).min(axis=2)
    fit = np.where(allowed, np.minimum(fit, upper[:, None]), 0)
    class_gang = np.array(
        [gang_names.index(g) if (g := items[k].gang) is not None else -1 for k in first], int
    )
    capref = np.maximum(cap.max(axis=0), 1).astype(float)
    weights = [np.eye(len(resources))[r] for r in range(len(resources))] + [1.0 / capref]
    item_class = np.zeros(len(items), np.int64)
    for c, members in enumerate(class_items):
        item_class[members] = c
    allowed_rows, allowed_id = np.unique(allowed, axis=0, return_inverse=True)
    accel = np.array(
        [sum(v for k, v in shapes[items[k].shape].requests if is_accelerator(k)) for k in first],
        float,
    )
    return _Problem(
        shapes=shapes,
        candidates=candidates,
        items=items,
        class_items=class_items,
        cap=cap,
        size=size,
        demand=demand,
        upper=upper,
        allowed=allowed,
        fit=fit,
        price=price,
        obj=obj,
        limits=limits,
        class_gang=class_gang,
        gangs=gang_names,
        weights=weights,
        capref=capref,
        penalty=1.0 + 2.0 * float(obj.max()),
        accel=accel,
        item_class=item_class,
        domains=domains,
        allowed_id=allowed_id.ravel(),
        allowed_rows=allowed_rows,
    )


# -- packings: nodes with class counts ----------------------------------------------------------


class _Packing:
    """Nodes (candidate index + class counts) built by the greedy or decoded from columns."""

    def __init__(self, p: _Problem) -> None:
        self.p = p
        self.n = 0
        self.cand = np.zeros(16, np.int64)
        self.counts = np.zeros((16, p.n_classes), np.int64)
        self.used = np.zeros((16, p.cap.shape[1]), np.int64)
        self.head = p.limits.headroom.astype(float).copy()

    def _grow(self, extra: int) -> None:
        need = self.n + extra
        if need <= len(self.cand):
            return
        size = max(need, 2 * len(self.cand))
        self.cand = np.resize(self.cand, size)
        counts = np.zeros((size, self.counts.shape[1]), np.int64)
        counts[: self.n] = self.counts[: self.n]
        used = np.zeros((size, self.used.shape[1]), np.int64)
        used[: self.n] = self.used[: self.n]
        self.counts, self.used = counts, used

    def open(self, j: int, k: int) -> slice:
        """Open ``k`` empty nodes of candidate ``j``."""
        self._grow(k)
        rows = slice(self.n, self.n + k)
        self.cand[rows] = j
        self.counts[rows] = 0
        self.used[rows] = 0
        self.n += k
        if len(self.p.limits):
            self.head -= self.p.limits.matrix[:, j] * k
        return rows

    def add(self, rows: slice | np.ndarray, c: int, amounts: np.ndarray) -> None:
        self.counts[rows, c] += amounts
        self.used[rows] += amounts[:, None] * self.p.size[c][None, :]

    def covered(self) -> np.ndarray:
        return np.asarray(self.counts[: self.n].sum(axis=0))

    def compact(self) -> None:
        """Drop nodes without pods (their limit usage returns to the headroom)."""
        keep = self.counts[: self.n].sum(axis=1) > 0
        if keep.all():
            return
        if len(self.p.limits):
            gone = self.cand[: self.n][~keep]
            self.head += self.p.limits.matrix[:, gone].sum(axis=1)
        idx = np.flatnonzero(keep)
        self.cand[: len(idx)] = self.cand[idx]
        self.counts[: len(idx)] = self.counts[idx]
        self.used[: len(idx)] = self.used[idx]
        self.n = len(idx)

    def remove(self, c: int, amount: int) -> None:
        """Take ``amount`` pods of class ``c`` off the nodes, last nodes first."""
        for n in range(self.n - 1, -1, -1):
            if amount <= 0:
                break
            k = min(int(self.counts[n, c]), amount)
            if k:
                self.counts[n, c] -= k
                self.used[n] -= k * self.p.size[c]
                amount -= k

    def right_size(self) -> None:
        """Move every node to the cheapest candidate that holds its pods within the limits."""
        p = self.p
        self.compact()
        if not self.n:
            return
        L = p.limits.matrix
        onehot = np.zeros((p.n_classes, len(p.allowed_rows)), bool)
        onehot[np.arange(p.n_classes), p.allowed_id] = True
        present = (self.counts[: self.n] > 0).astype(np.int64) @ onehot.astype(np.int64) > 0
        sets, group = np.unique(present, axis=0, return_inverse=True)
        group = group.ravel()
        for g, row in enumerate(sets):
            ok = p.allowed_rows[row].all(axis=0)
            nodes = np.flatnonzero(group == g)
            for start in range(0, len(nodes), 256):
                chunk = nodes[start : start + 256]
                feas = ok[None, :] & (p.cap[None, :, :] >= self.used[chunk][:, None, :]).all(axis=2)
                if not len(L):
                    feas[np.arange(len(chunk)), self.cand[chunk]] = True
                    self.cand[chunk] = np.argmin(np.where(feas, p.obj[None, :], np.inf), axis=1)
                    continue
                for a, n in enumerate(chunk):
                    cur = int(self.cand[n])
                    f = feas[a] & ((self.head + L[:, cur])[:, None] + 1e-9 >= L).all(axis=0)
                    f[cur] = True
                    j = int(np.argmin(np.where(f, p.obj, np.inf)))
                    if p.obj[j] < p.obj[cur] - 1e-12:
                        self.head += L[:, cur] - L[:, j]
                        self.cand[n] = j


def _node_allowed(p: _Problem, pack: _Packing, n: int) -> np.ndarray:
    """Candidates every class on node ``n`` may use."""
    ids = np.unique(p.allowed_id[np.flatnonzero(pack.counts[n])])
    return np.asarray(p.allowed_rows[ids].all(axis=0))


def _improve(p: _Problem, pack: _Packing, deadline: float) -> None:
    """Local search: move a node to the next cheaper candidate (or empty it) when the pods
    that no longer fit can be re-homed in the spare room of the other nodes."""
    L = p.limits.matrix
    norm = p.size / p.capref
    improved = True
    while improved and time.perf_counter() < deadline:
        improved = False
        pack.compact()
        closed = np.zeros(pack.n, bool)
        cap_now = p.cap[pack.cand[: pack.n]]
        util = (pack.used[: pack.n] / np.maximum(cap_now, 1)).max(axis=1)
        for n in np.argsort(util, kind="stable").tolist():
            if time.perf_counter() > deadline:
                return
            if pack.counts[n].sum() == 0:
                continue
            cur = int(pack.cand[n])
            ok = _node_allowed(p, pack, n) & (p.obj < p.obj[cur] - 1e-12)
            if len(L):
                ok &= ((pack.head + L[:, cur])[:, None] + 1e-9 >= L).all(axis=0)
            target = int(np.argmax(np.where(ok, p.obj, -np.inf))) if ok.any() else -1
            for j in ([target] if target >= 0 else []) + [-1]:
                if _shrink(p, pack, n, j, norm, closed):
                    if j >= 0:
                        if len(L):
                            pack.head += L[:, cur] - L[:, j]
                        pack.cand[n] = j
                    else:
                        closed[n] = True
                    improved = True
                    break


def _shrink(
    p: _Problem, pack: _Packing, n: int, j: int, norm: np.ndarray, closed: np.ndarray
) -> bool:
    """Evict pods from node ``n`` until it fits candidate ``j`` (all of them when ``j`` is
    -1) and re-home them on other nodes; undone unless every pod finds a place. Two choices of
    pods to evict are tried: those using least of what the other nodes have spare per unit of
    the shortfall they clear, then simply the smallest."""
    present = np.flatnonzero(pack.counts[n])
    room = p.cap[pack.cand[: pack.n]] - pack.used[: pack.n]
    room[n] = 0
    room[closed[: pack.n]] = 0
    spare = np.maximum(room.sum(axis=0), 0)
    if j < 0:
        if (pack.used[n] > spare).any():
            return False
        return _rehome(p, pack, n, {int(c): int(pack.counts[n, c]) for c in present}, closed, norm)
    deficit0 = pack.used[n] - p.cap[j]
    short = deficit0 > 0
    sizes = p.size[present]
    cost = (sizes / np.maximum(spare, 1)).sum(axis=1)
    gain = (sizes[:, short] / np.maximum(deficit0[short], 1)).sum(axis=1)
    orders = [np.argsort(cost / np.maximum(gain, 1e-12), kind="stable")]
    orders.append(np.argsort(norm[present].sum(axis=1), kind="stable"))
    for order in orders:
        deficit = deficit0.copy()
        evict: dict[int, int] = {}
        for c in present[order].tolist():
            if (deficit <= 0).all():
                break
            size = p.size[c]
            useful = (deficit > 0) & (size > 0)
            if not useful.any():
                continue
            k = min(int(np.max(-(-deficit[useful] // size[useful]))), int(pack.counts[n, c]))
            evict[c] = k
            deficit = deficit - k * size
        if (deficit <= 0).all() and _rehome(p, pack, n, evict, closed, norm):
            return True
    return False


def _rehome(
    p: _Problem,
    pack: _Packing,
    n: int,
    evict: Mapping[int, int],
    closed: np.ndarray,
    norm: np.ndarray,
) -> bool:
    """Move ``evict`` (class -> pods) from node ``n`` to the fullest other nodes with room."""
    moves: list[tuple[int, np.ndarray]] = []
    others = ~closed[: pack.n]
    others[n] = False
    for c, k in sorted(evict.items(), key=lambda ck: -norm[ck[0]].sum()):
        size = p.size[c]
        nz = size > 0
        cand = pack.cand[: pack.n]
        free = p.cap[cand][:, nz] - pack.used[: pack.n][:, nz]
        q = np.floor_divide(free, size[nz]).min(axis=1)
        q = np.minimum(q, p.upper[c] - pack.counts[: pack.n, c])
        q = np.where(others & p.allowed[c, cand], np.maximum(q, 0), 0)
        if q.sum() < k:
            for c2, take in moves:
                pack.add(slice(0, pack.n), c2, -take)
            return False
        spare = ((p.cap[cand] - pack.used[: pack.n]) / p.capref).sum(axis=1)
        order = np.argsort(spare, kind="stable")  # best fit: fullest nodes first
        qo = q[order]
        take_o = np.clip(k - (np.cumsum(qo) - qo), 0, qo)
        take = np.zeros(pack.n, np.int64)
        take[order] = take_o
        pack.add(slice(0, pack.n), c, take)
        moves.append((c, take))
    for c, k in evict.items():
        pack.counts[n, c] -= k
        pack.used[n] -= k * p.size[c]
    return True


def _order(p: _Problem, classes: np.ndarray, rule: str) -> list[int]:
    weight = (p.size / p.capref).sum(axis=1)
    capped = p.upper < p.demand
    if rule == "spread":  # capped, then the largest batches
        key = np.lexsort((-weight[classes], -p.demand[classes], ~capped[classes]))
    elif rule == "balance":  # the most constrained, then capped, then the largest batches
        choices = p.allowed[classes].sum(axis=1)
        key = np.lexsort((-weight[classes], -p.demand[classes], ~capped[classes], choices))
    elif rule == "big":
        key = np.lexsort((-weight[classes], -p.accel[classes], ~capped[classes]))
    else:
        key = np.lexsort((-weight[classes], -p.accel[classes]))
    return [int(c) for c in classes[key]]


def _even(q: np.ndarray, left: int, load: np.ndarray) -> np.ndarray:
    """Share ``left`` pods over nodes taking at most ``q`` each, as evenly as possible (the
    least loaded nodes get the odd ones)."""
    if q.sum() <= left:
        return q.copy()
    lo, hi = 0, int(q.max())
    while lo < hi:  # largest t with sum(min(q, t)) <= left
        mid = (lo + hi + 1) // 2
        if np.minimum(q, mid).sum() <= left:
            lo = mid
        else:
            hi = mid - 1
    take: np.ndarray = np.minimum(q, lo)
    rest = left - int(take.sum())
    if rest:
        room = np.flatnonzero(q > take)
        take[room[np.argsort(load[room], kind="stable")[:rest]]] += 1
    return take


def _fill(p: _Problem, pack: _Packing, need: np.ndarray, rule: str) -> None:
    """Put ``need`` pods per class on the open nodes (first fit, or shared evenly for the
    ``spread`` rule), opening new nodes as needed."""
    L = p.limits.matrix
    capw = (p.cap / p.capref).sum(axis=1)
    for c in _order(p, np.flatnonzero(need > 0), rule):
        left = int(need[c])
        size = p.size[c]
        nz = size > 0
        if pack.n:
            cand = pack.cand[: pack.n]
            free = p.cap[cand][:, nz] - pack.used[: pack.n][:, nz]
            q = np.floor_divide(free, size[nz]).min(axis=1)
            q = np.minimum(q, p.upper[c] - pack.counts[: pack.n, c])
            q = np.where(p.allowed[c, cand], np.maximum(q, 0), 0)
            if rule == "spread":
                # equal shares; the odd pods where their own resources are least used
                load = (pack.used[: pack.n] / p.capref) @ (size / p.capref)
                take = _even(q, left, load)
            elif rule == "balance":
                # shares in proportion to the room left for what the pod uses (dot product)
                room = (p.cap[cand] - pack.used[: pack.n]) / p.capref
                w = np.where(q > 0, np.maximum(room @ (size / p.capref), 0), 0)
                share = np.zeros_like(q)
                if left < q.sum() and w.sum() > 0:
                    share = np.minimum(q, np.floor(left * w / w.sum()).astype(np.int64))
                take = share + _even(q - share, left - int(share.sum()), -w)
            else:
                before = np.cumsum(q) - q
                take = np.clip(left - before, 0, q)
            if take.any():
                pack.add(slice(0, pack.n), c, take)
                left -= int(take.sum())
        while left > 0:
            per = p.fit[c]
            ok = per > 0
            if len(L):
                ok &= (pack.head[:, None] + 1e-9 >= L).all(axis=0)
            if not ok.any():
                break
            if rule != "pod":
                score = np.where(ok, p.obj / np.maximum(capw, 1e-12), np.inf)
                j = int(np.lexsort((-capw, score))[0])
            else:
                score = np.where(ok, p.obj / np.minimum(left, np.maximum(per, 1)), np.inf)
                j = int(np.lexsort((-per, score))[0])
            k = -(-left // int(per[j]))
            if len(L):
                col = L[:, j]
                pos = col > 0
                if pos.any():
                    k = min(k, int(np.floor((pack.head[pos] + 1e-9) / col[pos]).min()))
            k = max(k, 1)
            rows = pack.open(j, k)
            if rule in ("spread", "balance"):
                amounts = _even(np.full(k, int(per[j]), np.int64), left, np.zeros(k))
            else:
                amounts = np.full(k, int(per[j]), np.int64)
                amounts[-1] = min(int(per[j]), left - int(per[j]) * (k - 1))
                amounts = np.maximum(amounts, 0)
            pack.add(rows, c, amounts)
            left -= int(amounts.sum())


def _greedy(p: _Problem, rule: str, start: _Packing | None = None) -> _Packing:
    """The greedy plan; gangs it cannot place in full are left out (and the rest redone)."""
    excluded: set[int] = set()
    while True:
        pack = start if start is not None else _Packing(p)
        need = p.demand - (pack.covered() if start is not None else 0)
        need = np.maximum(need, 0)
        for g in excluded:
            need[p.class_gang == g] = 0
        _fill(p, pack, need, rule)
        short = p.demand - pack.covered()
        broken = {int(g) for g in np.unique(p.class_gang[short > 0]) if g >= 0} - excluded
        if not broken or start is not None:
            pack.right_size()
            return pack
        excluded |= broken


# -- column generation ----------------------------------------------------------------------


@dataclass
class _Columns:
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


def _master(p: _Problem, cols: _Columns) -> tuple[np.ndarray, sp.csc_array, np.ndarray, Bounds]:
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
    p: _Problem, cols: _Columns
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray] | None:
    """The master LP: value, column values, covering duals (>= 0), limit duals (>= 0)."""
    cost, A, head, _ = _master(p, cols)
    C = p.n_classes
    A = A.tocsr()
    A_ub = sp.vstack([-A[:C], A[C:]]).tocsc()
    b_ub = np.concatenate([-p.demand.astype(float), head])
    res = linprog(cost, A_ub=A_ub, b_ub=b_ub, bounds=(0, None), method="highs")
    if res.status != 0:
        return None
    duals = -np.asarray(res.ineqlin.marginals)
    return (
        float(res.fun),
        np.asarray(res.x)[: len(cols)],
        np.maximum(duals[:C], 0),
        np.maximum(duals[C:], 0),
    )


def _price_greedy(p: _Problem, pi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def _resource_prices(p: _Problem) -> tuple[float, np.ndarray]:
    """The best bound from resource prices alone: max sum_c d_c (lam·s_c) s.t. lam·cap_j <= c_j
    for every candidate (then pi_c = lam·s_c is dual feasible). Returns the bound and pi."""
    res = linprog(
        -(p.demand @ p.size).astype(float),
        A_ub=p.cap.astype(float),
        b_ub=p.obj,
        bounds=(0, None),
        method="highs",
    )
    if res.status != 0:
        return 0.0, np.zeros(p.n_classes)
    lam = np.asarray(res.x)
    pi = p.size @ lam
    return float(pi @ p.demand), np.minimum(pi, p.penalty)


def _knapsack_upper(p: _Problem, pi: np.ndarray) -> np.ndarray:
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


def _knapsack_exact(
    p: _Problem, pi: np.ndarray, j: int, seconds: float
) -> tuple[float, np.ndarray, bool]:
    """max pi·a s.t. sizes·a <= cap_j, 0 <= a <= fit_j, integer (a small MILP)."""
    idx = np.flatnonzero((p.fit[:, j] > 0) & (pi > 1e-12))
    a = np.zeros(p.n_classes, np.int64)
    if not len(idx):
        return 0.0, a, True
    res = milp(
        c=-pi[idx],
        constraints=LinearConstraint(p.size[idx].T.astype(float), -np.inf, p.cap[j].astype(float)),
        integrality=np.ones(len(idx)),
        bounds=Bounds(0, p.fit[idx, j].astype(float)),
        options={"time_limit": max(0.05, seconds)},
    )
    if res.x is None:
        return 0.0, a, False
    a[idx] = np.round(res.x).astype(np.int64)
    return float(pi @ a), a, res.status == 0


def _most_nodes(p: _Problem) -> np.ndarray:
    """Per candidate, the most nodes the limit rows allow (inf when no row limits it)."""
    L = p.limits.matrix
    if not len(L):
        return np.full(len(p.obj), np.inf)
    per_row = np.where(L > 0, p.limits.headroom[:, None] / np.where(L > 0, L, 1), np.inf)
    return np.asarray(np.floor(per_row.min(axis=0) + 1e-9))


def _lower_bound(
    p: _Problem, z: float, pi: np.ndarray, mu: np.ndarray, value_ub: np.ndarray
) -> float:
    """A valid lower bound on the LP optimum from the duals (Farley scaling, with Lagrangian
    terms for candidates whose count a limit row bounds)."""
    L = p.limits.matrix
    net = value_ub - (mu @ L if len(L) else 0.0)
    ymax = _most_nodes(p)
    best = -np.inf
    for lagrange in (np.isfinite(ymax), np.isfinite(ymax) & (p.price <= p.obj * 0.999), None):
        lag = np.zeros(len(p.obj), bool) if lagrange is None else lagrange
        ratio = np.where(lag, 0.0, net / p.obj)
        theta = max(1.0, float(ratio.max(initial=1.0)))
        excess = np.maximum(0.0, net / theta - p.obj)
        bound = z / theta - float((ymax[lag] * excess[lag]).sum())
        best = max(best, bound)
    return best


@dataclass
class _Relaxation:
    value: float = 0.0
    bound: float = 0.0
    exact: bool = False
    y: np.ndarray = field(default_factory=lambda: np.zeros(0))
    rounds: int = 0


def _column_generation(
    p: _Problem,
    cols: _Columns,
    deadline: float,
    max_rounds: int,
    bound_res: float,
    pi_res: np.ndarray,
) -> _Relaxation:
    out = _Relaxation(bound=bound_res)
    exact_budget = math.inf if p.n_classes <= SMALL else 12
    tol = 1e-9 * max(1.0, float(p.obj.max()))
    pi = mu = np.zeros(0)
    for _ in range(max_rounds):
        out.rounds += 1
        solved = _solve_lp(p, cols)
        if solved is None:
            break
        out.value, out.y, pi, mu = solved
        reduced_base = p.obj + (mu @ p.limits.matrix if len(p.limits) else 0.0)
        values, patterns = _price_greedy(p, pi)
        rc = reduced_base - values
        improving = np.flatnonzero(rc < -tol)
        order = improving[np.argsort(rc[improving] / p.obj[improving])]
        added = sum(cols.add(int(j), patterns[j]) for j in order[:COLUMNS_PER_ROUND])
        if time.perf_counter() > deadline:
            break
        if added:
            continue
        # no greedy column: bound the knapsacks, solve the most promising ones exactly
        upper = np.maximum(_knapsack_upper(p, pi), values)
        out.bound = max(out.bound, _lower_bound(p, out.value, pi, mu, upper))
        if out.value - out.bound <= CG_GAP * max(out.value, 1e-12):
            break
        suspects = np.flatnonzero(upper - reduced_base > tol)
        suspects = suspects[
            np.argsort(-(upper[suspects] - reduced_base[suspects]) / p.obj[suspects])
        ]
        proven = True
        for checked, j in enumerate(suspects.tolist()):
            left = deadline - time.perf_counter()
            if left <= 0 or checked >= exact_budget:
                proven = False
                break
            value, pattern, optimal = _knapsack_exact(p, pi, j, min(1.0, left))
            if reduced_base[j] - value < -tol and cols.add(j, pattern):
                added += 1
            elif optimal:
                upper[j] = value
            else:
                proven = False
        if not added:
            out.exact = proven
            out.bound = (
                out.value if proven else max(out.bound, _lower_bound(p, out.value, pi, mu, upper))
            )
            break
    if pi.size and not out.exact:  # mix the LP duals with the resource prices
        for alpha in (0.9, 0.75, 0.5, 0.25):
            pim, mum = alpha * pi + (1 - alpha) * pi_res, alpha * mu
            z = alpha * out.value + (1 - alpha) * bound_res
            out.bound = max(out.bound, _lower_bound(p, z, pim, mum, _knapsack_upper(p, pim)))
    if out.value > 0:
        out.bound = min(out.bound, out.value)
        out.exact = out.exact or out.bound >= out.value * (1 - 1e-9)
    return out


def _decode(p: _Problem, cols: _Columns, y: np.ndarray) -> _Packing:
    """Nodes for integer column values, pods assigned up to each class's demand."""
    pack = _Packing(p)
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


def _solve_ilp(p: _Problem, cols: _Columns, seconds: float) -> np.ndarray | None:
    cost, A, head, bounds = _master(p, cols)
    C = p.n_classes
    A = A.tocsr()
    constraints = [LinearConstraint(A[:C], p.demand.astype(float), np.inf)]
    if len(p.limits):
        constraints.append(LinearConstraint(A[C:], -np.inf, head))
    n_free = int((p.class_gang < 0).sum())
    integrality = np.concatenate([np.ones(len(cols)), np.zeros(n_free), np.ones(len(p.gangs))])
    res = milp(
        c=cost,
        constraints=constraints,
        integrality=integrality,
        bounds=bounds,
        options={"time_limit": max(0.1, seconds), "mip_rel_gap": 1e-3},
    )
    if res.x is None:
        return None
    return np.asarray(res.x)[: len(cols)]


# -- topology checks, reasons and the plan ---------------------------------------------------


def _item_coverage(p: _Problem, covered: np.ndarray) -> np.ndarray:
    """Per item, how many of its pods the class coverage reaches (earlier items first)."""
    out = np.zeros(len(p.items), np.int64)
    for c, members in enumerate(p.class_items):
        left = int(covered[c])
        for k in members:
            out[k] = min(p.items[k].count, left)
            left -= out[k]
    return out


def _enforce_topology(p: _Problem, pack: _Packing) -> tuple[dict[int, str], np.ndarray]:
    """Trim zone spreads that fell short and drop gangs not placed in full.

    Returns, per shape with pods left out, why (limits that block more nodes, the spread, or
    the gang), worked out before anything is taken off; and how many pods of each item are
    planned in the end.
    """
    cover = _item_coverage(p, pack.covered())
    why: dict[int, str] = {}
    for k, it in enumerate(p.items):
        if cover[k] < it.count and it.shape not in why:
            why[it.shape] = _blocking(p, pack, int(p.item_class[k]))
    removal = np.zeros(len(p.items), np.int64)
    by_shape: dict[int, list[int]] = {}
    for k, it in enumerate(p.items):
        by_shape.setdefault(it.shape, []).append(k)
    for s, ks in by_shape.items():
        shape = p.shapes[s]
        if not shape.zone_spread or all(cover[k] == p.items[k].count for k in ks):
            continue
        placed = dict.fromkeys(p.domains.get(s, []), 0)
        placed.update({str(p.items[k].zone): int(cover[k]) for k in ks})
        kept = spread_cap(placed, dict(shape.zone_counts))
        for k in ks:
            removal[k] = placed[str(p.items[k].zone)] - kept[str(p.items[k].zone)]
        short = [str(p.items[k].zone) for k in ks if cover[k] < p.items[k].count]
        why[s] = (
            f"zone spread (maxSkew 1): zone {', '.join(short)} cannot take all its pods "
            f"({why.get(s, 'blocked')}), so no zone may run more than one pod above the emptiest"
        )
    cover = cover - removal
    for gang in p.gangs:
        ks = [k for k, it in enumerate(p.items) if it.gang == gang]
        if all(cover[k] == p.items[k].count for k in ks):
            continue
        root = next(p.items[k].shape for k in ks if cover[k] < p.items[k].count)
        text = (
            f"gang '{gang}' cannot be planned in full, so none of it is: shape {root}: "
            f"{why.get(root, 'not planned')}"
        )
        for k in ks:
            removal[k] += cover[k]
            why[p.items[k].shape] = text
        cover[ks] = 0
    if removal.any():
        for c, members in enumerate(p.class_items):
            amount = int(removal[members].sum())
            if amount:
                pack.remove(c, amount)
        pack.right_size()
    return why, cover


def _blocking(p: _Problem, pack: _Packing, c: int) -> str:
    """Which limits keep another node for class ``c`` from being planned."""
    L = p.limits.matrix
    fits = np.flatnonzero(p.fit[c] > 0)
    fallback = "no node could be planned for them within the time limit"
    if not len(L) or not len(fits):
        return fallback
    planned = L[:, pack.cand[: pack.n]].sum(axis=1)
    blocked: dict[int, list[str]] = {}
    for j in fits:
        rows = np.flatnonzero(L[:, j] > pack.head + 1e-9)
        if not len(rows):
            return fallback
        for row in rows.tolist():
            blocked.setdefault(row, []).append(p.candidates[j].instance.name)
    parts = []
    for k, types in blocked.items():
        names = sorted(set(types))
        shown = ", ".join(names[:4]) + (f" (+{len(names) - 4} more)" if len(names) > 4 else "")
        parts.append(f"{describe_row(p.limits, k, float(planned[k]))} blocks {shown}")
    return "; ".join(parts)


def _finish(
    p: _Problem, pack: _Packing, plan: Plan, why: Mapping[int, str], cover: np.ndarray
) -> None:
    """Reasons for pods left out, the planned nodes with their pods, launches and cost."""
    missing: dict[int, int] = {}
    for k, it in enumerate(p.items):
        if it.count > cover[k]:
            missing[it.shape] = missing.get(it.shape, 0) + it.count - int(cover[k])
    for s, n in sorted(missing.items()):
        reason = why.get(s, "no node could be planned for them within the time limit")
        plan.unplaceable[s] = f"{n} of {p.shapes[s].count} pods not planned: {reason}"
    # per node, which shapes: hand each class's pods on the nodes to its items in order
    per_node: list[dict[int, int]] = [{} for _ in range(pack.n)]
    for c, members in enumerate(p.class_items):
        nodes = np.flatnonzero(pack.counts[: pack.n, c])
        amounts = pack.counts[nodes, c].copy()
        pos = 0
        for k in members:
            want, s = int(cover[k]), p.items[k].shape
            while want > 0 and pos < len(nodes):
                t = min(want, int(amounts[pos]))
                per_node[nodes[pos]][s] = per_node[nodes[pos]].get(s, 0) + t
                amounts[pos] -= t
                want -= t
                if amounts[pos] == 0:
                    pos += 1
    for n in range(pack.n):
        cand = p.candidates[int(pack.cand[n])]
        o = cand.offering
        plan.nodes.append(
            PlannedNode(
                cand.pool,
                cand.instance.name,
                o.zone,
                o.capacity_type,
                o.price_per_hour,
                tuple(sorted(per_node[n].items())),
                cand.reservation,
            )
        )
    counts: dict[tuple[str, str, str, str, float], int] = {}
    for node in plan.nodes:
        key = (node.pool, node.instance_type, node.zone, node.capacity_type, node.price_per_hour)
        counts[key] = counts.get(key, 0) + 1
    plan.launches = sorted(
        (Launch(*key[:4], n, key[4]) for key, n in counts.items()),
        key=lambda la: (la.pool, la.instance_type, la.zone, la.capacity_type, la.price_per_hour),
    )
    plan.hourly_cost = sum(node.price_per_hour for node in plan.nodes)


def _gap(p: _Problem, pack: _Packing, bound: float) -> float:
    return (_score(p, pack) - bound) / max(bound, 1e-12)


def _singletons(p: _Problem, cols: _Columns) -> None:
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


def _score(p: _Problem, pack: _Packing) -> float:
    short = np.maximum(p.demand - pack.covered(), 0).sum()
    return float(p.obj[pack.cand[: pack.n]].sum()) + p.penalty * float(short)


def plan_nodes(
    shapes: Sequence[PodShape],
    pools: Sequence[NodePool],
    catalog: Catalog,
    offerings: Sequence[Offering],
    *,
    pool_usage: Mapping[str, Mapping[str, int]] | None = None,
    time_limit: float = 10.0,
    max_rounds: int = 50,
    account_limits: AccountLimits | None = None,
    running_instances: Sequence[Instance] = (),
    target_gap: float = 0.02,
) -> Plan:
    """The cheapest launches that fit every shape's pods (see module docstring).

    ``account_limits``: vCPU quotas, per-type counts and capacity reservations of the cloud
    account; ``running_instances``: the instances that exist now (their usage counts against
    those limits). ``pool_usage``: per pool, what its existing nodes already use of its limits
    (milli-units; ``nodes`` as a count). ``target_gap``: when the greedy plan is already this
    close to the lower bound, column generation and the MILP are skipped (small problems always
    run them).
    """
    started = time.perf_counter()
    plan = Plan()
    p = _build(
        shapes,
        pools,
        catalog,
        offerings,
        pool_usage or {},
        account_limits,
        running_instances,
        plan,
    )
    if p is None:
        plan.seconds = time.perf_counter() - started
        return plan
    clock = {"build_s": time.perf_counter() - started}

    def lap(name: str) -> None:
        clock[name] = time.perf_counter() - started - sum(clock.values())

    plans: list[tuple[str, _Packing]] = [
        ("greedy", _greedy(p, r)) for r in ("pod", "big", "spread", "balance")
    ]
    costs = {f"cost_greedy_{i}": _score(p, pk) for i, (_, pk) in enumerate(plans)}
    best_method, best = min(plans, key=lambda mp: _score(p, mp[1]))
    lap("greedy_s")
    res_bound, pi_res = _resource_prices(p)
    bound = res_bound
    _improve(p, best, started + 0.25 * time_limit)
    costs["cost_improved"] = _score(p, best)
    lap("improve_s")
    small = p.n_classes * len(p.candidates) <= SMALL_PROBLEM
    relax = _Relaxation(bound=bound)
    cols = _Columns()
    if small or _gap(p, best, bound) > target_gap:
        for _, pack in plans:
            for n in range(pack.n):
                cols.add(int(pack.cand[n]), pack.counts[n])
        _singletons(p, cols)
        relax = _column_generation(p, cols, started + 0.5 * time_limit, max_rounds, bound, pi_res)
        bound = max(bound, relax.bound)
        lap("lp_s")
        if relax.y.size:
            pack = _greedy(p, "spread", start=_decode(p, cols, np.floor(relax.y + 1e-6)))
            costs["cost_lp_rounding"] = _score(p, pack)
            if _score(p, pack) < _score(p, best) - 1e-9:
                best_method, best = "lp-rounding", pack
        left = time_limit - (time.perf_counter() - started)
        if (small or p.n_classes <= SMALL) and _gap(p, best, bound) > 1e-6 and left > 0.05:
            y = _solve_ilp(p, cols, left)
            if y is not None:
                pack = _greedy(p, "spread", start=_decode(p, cols, y))
                costs["cost_milp"] = _score(p, pack)
                if _score(p, pack) < _score(p, best) - 1e-9:
                    best_method, best = "milp", pack
        lap("milp_s")
        if best_method != "greedy":
            _improve(p, best, started + time_limit)
            lap("improve2_s")
    why, cover = _enforce_topology(p, best)
    _finish(p, best, plan, why, cover)
    plan.method = best_method
    # the bound is on objective prices; free reservations cost a tiny amount there
    token = p.obj - p.price
    ymax = np.minimum(_most_nodes(p), float(p.demand.sum()))
    nudge = float((token * np.where(token > 0, ymax, 0)).sum())
    uncovered = float(np.maximum(p.demand - best.covered(), 0).sum())
    plan.lower_bound = max(0.0, bound - p.penalty * uncovered - nudge)
    plan.bound_is_proven = uncovered == 0 and plan.lower_bound > 0
    plan.stats = {
        "classes": p.n_classes,
        "items": len(p.items),
        "candidates": len(p.candidates),
        "columns": len(cols),
        "rounds": relax.rounds,
        "lp_value": relax.value,
        "lp_converged": float(relax.exact),
        "resource_bound": res_bound,
        **costs,
        **clock,
    }
    plan.seconds = time.perf_counter() - started
    return plan


def _why_unplaceable(shape: PodShape, pools: Sequence[NodePool], catalog: Catalog) -> str:
    req = shape.request()
    biggest = [
        inst.name
        for inst in catalog
        if any(p.allows(inst) for p in pools) and _fits_count(req, inst.allocatable) >= 1
    ]
    if not biggest:
        return "no instance type any node pool may launch is large enough for one pod"
    return (
        "no node pool offers a fitting instance type that matches the pod's node selector, "
        "tolerations, zones and capacity types (or its offerings are unavailable)"
    )
