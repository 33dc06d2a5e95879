"""Choose the cheapest set of new nodes for pending pods (pure decision functions).

The problem is variable-sized bin packing with prices: pods are grouped into *shapes* (same
requests and constraints); a *pattern* says how many pods of each shape one node of an instance
type holds. Column generation finds good patterns: the master LP covers every shape's pods at
least once at least cost (HiGHS via scipy); its duals price a multi-dimensional knapsack per
instance type (a small MILP) that proposes the next pattern. At convergence the master LP value
is a lower bound on any plan's cost; the integer plan is then solved over the generated
patterns with a time limit, with a first-fit-decreasing greedy plan as the fallback and as a
safety net (the cheaper of the two is returned).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.model.catalog import Catalog, InstanceType
from fleetshare.model.node import INSTANCE_TYPE_LABEL, Taint, Toleration
from fleetshare.model.resources import GPU, is_accelerator

FAMILY_LABEL = "karpenter.k8s.aws/instance-family"
GPU_NAME_LABEL = "karpenter.k8s.aws/instance-gpu-name"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
POOL_LABEL = "karpenter.sh/nodepool"


@dataclass(frozen=True, slots=True)
class PodShape:
    """``count`` identical pending pods (of admissible workloads)."""

    requests: tuple[tuple[str, int], ...]
    count: int
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    workloads: tuple[str, ...] = ()

    def request(self) -> dict[str, int]:
        return dict(self.requests)


@dataclass(frozen=True, slots=True)
class Candidate:
    """An instance type a pool may launch, at its cheapest available offering."""

    pool: str
    instance: InstanceType
    offering: Offering

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


@dataclass
class Plan:
    """What to launch, what it costs, how good it is, and which pods cannot be helped."""

    launches: list[Launch] = field(default_factory=list)
    hourly_cost: float = 0.0
    lower_bound: float = 0.0
    bound_is_proven: bool = False
    method: str = "none"
    unplaceable: dict[int, str] = field(default_factory=dict)
    """Shape index -> why no pool can run it."""
    seconds: float = 0.0

    @property
    def gap(self) -> float:
        """Relative gap to the lower bound (0 when both are 0)."""
        if self.lower_bound <= 0:
            return 0.0
        return (self.hourly_cost - self.lower_bound) / self.lower_bound


# -- which candidates can run which shapes ----------------------------------------------------


def node_labels(candidate: Candidate, pool: NodePool) -> dict[str, str]:
    """Labels a node launched for this candidate would carry."""
    inst = candidate.instance
    labels = dict(pool.labels)
    labels[INSTANCE_TYPE_LABEL] = inst.name
    labels[FAMILY_LABEL] = inst.family
    labels[CAPACITY_TYPE_LABEL] = candidate.offering.capacity_type
    labels["topology.kubernetes.io/zone"] = candidate.offering.zone
    labels[POOL_LABEL] = pool.name
    if inst.gpu_name:
        labels[GPU_NAME_LABEL] = inst.gpu_name
    return labels


def _fits_count(requests: Mapping[str, int], allocatable: Mapping[str, int]) -> int:
    count = math.inf
    for name, amount in requests.items():
        if amount > 0:
            count = min(count, allocatable.get(name, 0) // amount)
    return 0 if count == math.inf else int(count)


def compatible(shape: PodShape, candidate: Candidate, pool: NodePool) -> bool:
    """True when a pod of ``shape`` may run on a node of ``candidate``."""
    labels = node_labels(candidate, pool)
    for key, value in shape.node_selector:
        wanted = value.removeprefix("ml.") if key == INSTANCE_TYPE_LABEL else value
        if labels.get(key) != wanted:
            return False
    for spec in pool.taints:
        taint = Taint(spec.key, spec.value, spec.effect)
        if taint.effect != "PreferNoSchedule" and not any(
            t.tolerates(taint) for t in shape.tolerations
        ):
            return False
    return _fits_count(shape.request(), candidate.instance.allocatable) >= 1


def candidates_for(
    pools: Sequence[NodePool], catalog: Catalog, offerings: Sequence[Offering]
) -> list[Candidate]:
    """Per pool and instance type, the cheapest available offering the pool allows."""
    by_type: dict[str, list[Offering]] = {}
    for offering in offerings:
        if offering.available:
            by_type.setdefault(offering.instance_type.removeprefix("ml."), []).append(offering)
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
                best = min(options, key=lambda o: (o.price_per_hour, o.zone, o.capacity_type))
                out.append(Candidate(pool.name, inst, best))
    return out


def _no_gpu_fallback(
    shape: PodShape, cands: list[int], candidates: Sequence[Candidate]
) -> list[int]:
    """Keep only the smallest GPU instances that fit (pools that forbid GPU fallback)."""
    if dict(shape.requests).get(GPU, 0) <= 0 or not cands:
        return cands
    smallest = min(candidates[i].instance.gpu_count for i in cands)
    return [i for i in cands if candidates[i].instance.gpu_count == smallest]


# -- the optimisation ----------------------------------------------------------------------


def _resources(shapes: Sequence[PodShape]) -> list[str]:
    names = {name for s in shapes for name, _ in s.requests}
    return sorted(names | {"pods"})


def _knapsack(
    values: np.ndarray, sizes: np.ndarray, capacity: np.ndarray, upper: np.ndarray
) -> tuple[float, np.ndarray]:
    """max values·a  s.t. sizes·a <= capacity, 0 <= a <= upper, a integer."""
    if not np.any(values > 1e-12):
        return 0.0, np.zeros(len(values))
    res = milp(
        c=-values,
        constraints=LinearConstraint(sizes, -np.inf, capacity),
        integrality=np.ones(len(values)),
        bounds=Bounds(0, upper),
        options={"time_limit": 1.0},
    )
    if res.x is None:
        return 0.0, np.zeros(len(values))
    a = np.round(res.x)
    return float(values @ a), a


def plan_nodes(
    shapes: Sequence[PodShape],
    pools: Sequence[NodePool],
    catalog: Catalog,
    offerings: Sequence[Offering],
    *,
    pool_usage: Mapping[str, Mapping[str, int]] | None = None,
    time_limit: float = 10.0,
    max_rounds: int = 50,
) -> Plan:
    """The cheapest launches that fit every shape's pods (see module docstring)."""
    started = time.perf_counter()
    plan = Plan()
    pools_by_name = {p.name: p for p in pools}
    candidates = candidates_for(pools, catalog, offerings)
    resources = _resources(shapes)
    usable: list[list[int]] = []
    for s_index, shape in enumerate(shapes):
        cands = [i for i, c in enumerate(candidates) if compatible(shape, c, pools_by_name[c.pool])]
        if cands and not all(pools_by_name[candidates[i].pool].allow_gpu_fallback for i in cands):
            cands = _no_gpu_fallback(shape, cands, candidates)
        if not cands:
            plan.unplaceable[s_index] = _why_unplaceable(shape, pools, catalog)
        usable.append(cands)
    active = [i for i in range(len(shapes)) if usable[i]]
    if not active:
        plan.seconds = time.perf_counter() - started
        return plan
    demand = np.array([shapes[i].count for i in active], float)
    sizes = np.array(
        [[shapes[i].request().get(r, 0) if r != "pods" else 1 for r in resources] for i in active],
        float,
    ).T
    cap = {
        j: np.array([c.instance.allocatable.get(r, 0) for r in resources], float)
        for j, c in enumerate(candidates)
    }
    allowed = {j: np.array([j in usable[i] for i in active]) for j in range(len(candidates))}

    def _per_node(shape_index: int, cand: int) -> int:
        return _fits_count(shapes[shape_index].request(), candidates[cand].instance.allocatable)

    columns: list[tuple[int, np.ndarray]] = []
    for k, i in enumerate(active):  # one single-shape pattern per shape: always feasible
        j = min(usable[i], key=lambda c: candidates[c].price / max(1, _per_node(i, c)))
        pattern = np.zeros(len(active))
        pattern[k] = min(
            shapes[i].count, _fits_count(shapes[i].request(), candidates[j].instance.allocatable)
        )
        columns.append((j, pattern))

    limits = _limit_rows(pools, candidates, pool_usage or {})
    lp_value, converged = 0.0, False
    for _ in range(max_rounds):
        if time.perf_counter() - started > time_limit / 2:
            break
        solved = _solve_lp(columns, candidates, demand, limits)
        if solved is None:
            break
        lp_value, duals, limit_duals = solved
        improved = False
        for j in range(len(candidates)):
            mask = allowed[j]
            if not mask.any():
                continue
            values = np.where(mask, duals, 0.0)
            upper = np.where(mask, demand, 0.0)
            value, pattern = _knapsack(values, sizes, cap[j], upper)
            penalty = sum(-mu * row[j] for row, mu in zip(limits.rows, limit_duals, strict=True))
            if candidates[j].price + penalty - value < -1e-7:
                columns.append((j, pattern))
                improved = True
        if not improved:
            converged = True
            break
    plan.lower_bound = lp_value
    plan.bound_is_proven = converged
    remaining = max(1.0, time_limit - (time.perf_counter() - started))
    integral = _solve_ilp(columns, candidates, demand, limits, remaining)
    greedy = _greedy(active, shapes, usable, candidates)
    best: list[tuple[int, int]] | None = None
    if integral is not None:
        best, plan.method = integral, "milp"
    if best is None or _cost(greedy, candidates) < _cost(best, candidates) - 1e-9:
        best, plan.method = greedy, "greedy"
    plan.launches = _launches(best, candidates)
    plan.hourly_cost = _cost(best, candidates)
    if not converged:
        plan.lower_bound = min(plan.lower_bound, plan.hourly_cost)
    plan.seconds = time.perf_counter() - started
    return plan


@dataclass
class _Limits:
    rows: list[np.ndarray] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    names: list[str] = field(default_factory=list)


def _limit_rows(
    pools: Sequence[NodePool],
    candidates: Sequence[Candidate],
    usage: Mapping[str, Mapping[str, int]],
) -> _Limits:
    """Pool limits as rows over candidates: per node, how much of the limit it uses."""
    out = _Limits()
    for pool in pools:
        for resource in pool.limits:
            limit = pool.limit_of(resource)
            assert limit is not None
            used = usage.get(pool.name, {}).get(resource, 0)
            if resource == "nodes":
                per_node = [1.0 if c.pool == pool.name else 0.0 for c in candidates]
                limit //= 1000
            else:
                per_node = [
                    float(c.instance.allocatable.get(resource, 0)) if c.pool == pool.name else 0.0
                    for c in candidates
                ]
            out.rows.append(np.array(per_node))
            out.upper.append(float(limit - used))
            out.names.append(f"{pool.name}:{resource}")
    return out


def _matrices(
    columns: list[tuple[int, np.ndarray]], candidates: Sequence[Candidate], limits: _Limits
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    costs = np.array([candidates[j].price for j, _ in columns])
    cover = np.column_stack([p for _, p in columns])
    rows = [[row[j] for j, _ in columns] for row in limits.rows]
    limit_matrix = np.array(rows) if rows else np.zeros((0, len(columns)))
    return costs, cover, limit_matrix


def _solve_lp(
    columns: list[tuple[int, np.ndarray]],
    candidates: Sequence[Candidate],
    demand: np.ndarray,
    limits: _Limits,
) -> tuple[float, np.ndarray, np.ndarray] | None:
    """The master LP: its value, the covering duals and the limit duals."""
    costs, cover, limit_matrix = _matrices(columns, candidates, limits)
    res = linprog(
        costs,
        A_ub=np.vstack([-cover, limit_matrix]),
        b_ub=np.concatenate([-demand, np.array(limits.upper, float)]),
        bounds=(0, None),
        method="highs",
    )
    if res.status != 0:
        return None
    marginals = -np.asarray(res.ineqlin.marginals)
    return float(res.fun), marginals[: len(demand)], -marginals[len(demand) :]


def _solve_ilp(
    columns: list[tuple[int, np.ndarray]],
    candidates: Sequence[Candidate],
    demand: np.ndarray,
    limits: _Limits,
    time_limit: float,
) -> list[tuple[int, int]] | None:
    """The integer plan over the generated patterns: (candidate, node count) pairs."""
    costs, cover, limit_matrix = _matrices(columns, candidates, limits)
    constraints = [LinearConstraint(cover, demand, np.inf)]
    if limits.rows:
        constraints.append(LinearConstraint(limit_matrix, -np.inf, np.array(limits.upper)))
    res = milp(
        c=costs,
        constraints=constraints,
        integrality=np.ones(len(columns)),
        bounds=Bounds(0, np.inf),
        options={"time_limit": time_limit},
    )
    if res.x is None:
        return None
    counts: dict[int, int] = {}
    for (j, _), y in zip(columns, np.round(res.x), strict=True):
        if y > 0:
            counts[j] = counts.get(j, 0) + int(y)
    return sorted(counts.items())


def _greedy(
    active: list[int],
    shapes: Sequence[PodShape],
    usable: list[list[int]],
    candidates: Sequence[Candidate],
) -> list[tuple[int, int]]:
    """First-fit decreasing onto open nodes; a new node is the candidate with the lowest price
    per pod of the current shape."""
    open_nodes: list[tuple[int, dict[str, int]]] = []
    order = sorted(
        active,
        key=lambda i: (
            -sum(v for k, v in shapes[i].requests if is_accelerator(k)) * 10**12
            - sum(v for _, v in shapes[i].requests)
        ),
    )
    for i in order:
        req = shapes[i].request()
        left = shapes[i].count
        for j, free in open_nodes:
            if j not in usable[i] or left == 0:
                continue
            n = min(left, _fits_count(req, free))
            for name, amount in req.items():
                free[name] -= amount * n
            left -= n
        while left > 0:
            j = min(
                usable[i],
                key=lambda c: (
                    candidates[c].price
                    / max(1, min(left, _fits_count(req, candidates[c].instance.allocatable))),
                    candidates[c].price,
                ),
            )
            free = dict(candidates[j].instance.allocatable)
            n = min(left, _fits_count(req, free))
            for name, amount in req.items():
                free[name] -= amount * n
            left -= n
            open_nodes.append((j, free))
    counts: dict[int, int] = {}
    for j, _ in open_nodes:
        counts[j] = counts.get(j, 0) + 1
    return sorted(counts.items())


def _cost(counts: list[tuple[int, int]], candidates: Sequence[Candidate]) -> float:
    return sum(candidates[j].price * n for j, n in counts)


def _launches(counts: list[tuple[int, int]], candidates: Sequence[Candidate]) -> list[Launch]:
    out = []
    for j, n in counts:
        c = candidates[j]
        o = c.offering
        out.append(Launch(c.pool, c.instance.name, o.zone, o.capacity_type, n, o.price_per_hour))
    return sorted(out, key=lambda launch: (launch.pool, launch.instance_type, launch.zone))


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
