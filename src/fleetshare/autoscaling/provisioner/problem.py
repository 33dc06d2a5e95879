"""The planning problem in arrays: shapes become items (one per zone when zonal) and items
that pack identically become classes; candidates another one dominates are dropped; limits are
rows ``L y <= headroom``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from fleetshare.autoscaling.account_limits import (
    AccountLimits,
    LimitRows,
    account_usage,
    limit_rows,
)
from fleetshare.autoscaling.cloud import Instance, Offering
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner.candidates import Candidate, labels_ok, offering_candidates
from fleetshare.autoscaling.provisioner.reasons import gang_not_planned, why_unplaceable
from fleetshare.autoscaling.provisioner.result import Plan
from fleetshare.autoscaling.topology import Item, PodShape, gang_members, split_items
from fleetshare.model.catalog import Catalog
from fleetshare.model.node import HOSTNAME_LABEL, ZONE_LABEL
from fleetshare.model.reason import Keyed
from fleetshare.model.resources import GPU, is_accelerator


@dataclass
class Problem:
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
    unit: np.ndarray  # S: pods per planned unit (a bundle sharing one node; else 1)
    resources: tuple[str, ...] = ()  # R: the resource of each column of ``cap`` and ``size``

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
                [labels_ok(shape, c, pools[c.pool]) for c in candidates], dtype=bool
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
    colf = allowed.T[first].astype(float)  # float: BLAS (counts are exact in doubles)
    # superset[u, v]: column u allows everything column v allows
    superset = (colf @ (1 - colf).T) == 0
    superset = superset.T
    chunk = max(1, 2_000_000 // max(1, J))
    for start in range(0, J, chunk):
        js = np.arange(start, min(J, start + chunk))
        # k dominates j
        m = superset[sig[None, :], sig[js, None]]  # len(js) x J: col(k) >= col(j)
        # per resource and limit row (2-D comparisons: no J x J x R temporaries)
        strict = obj[None, :] < obj[js, None] - 1e-12
        m &= obj[None, :] <= obj[js, None] + 1e-12
        for r in range(cap.shape[1]):
            m &= cap[None, :, r] >= cap[js, None, r]
            strict |= cap[None, :, r] > cap[js, None, r]
        for row in L:
            m &= row[None, :] <= row[js, None] + 1e-9
            strict |= row[None, :] < row[js, None] - 1e-9
        m &= strict | (np.arange(J)[None, :] < js[:, None])
        m[np.arange(len(js)), js] = False
        dead[js] = m.any(axis=1)
    return dead


def _sizes(
    shapes: Sequence[PodShape], candidates: list[Candidate], resources: list[str]
) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """Per shape the pods of one bundle (a pod set that shares one node is one bundle of all
    its pods, else 1), and the sizes of a pod and of a bundle (S x R) and the candidates'
    capacities (J x R), scaled together."""
    S, J = len(shapes), len(candidates)
    wanted = [s.count if s.domain is not None and s.count > 1 else 1 for s in shapes]
    raw_size = [[s.request().get(r, 0) if r != "pods" else 1000 for r in resources] for s in shapes]
    raw_bundle = [[v * n for v in row] for row, n in zip(raw_size, wanted, strict=True)]
    raw_cap = [[c.instance.allocatable.get(r, 0) for r in resources] for c in candidates]
    both = (
        _scaled(raw_size + raw_bundle + raw_cap)
        if shapes and candidates
        else np.zeros((2 * S + J, len(resources)), np.int64)
    )
    return wanted, both[:S], both[S : 2 * S], both[2 * S :]


def _compatibility(
    shapes: Sequence[PodShape],
    candidates: list[Candidate],
    pools: Mapping[str, NodePool],
    wanted: list[int],
    sizes: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """S x J: may a pod of the shape go on the candidate, and may a bundle of it (``sizes``:
    a pod's, a bundle's and the candidates' capacities, as :func:`_sizes` gives them)."""
    ssize, bsize, cap = sizes
    compat = np.zeros((len(shapes), len(candidates)), bool)
    bundle_ok = np.zeros((len(shapes), len(candidates)), bool)
    if len(shapes) and len(candidates):
        fits = np.asarray((cap[None, :, :] >= ssize[:, None, :]).all(axis=2))
        compat = _compat(shapes, candidates, pools, fits)
        if any(n > 1 for n in wanted):
            bfits = np.asarray((cap[None, :, :] >= bsize[:, None, :]).all(axis=2))
            bundle_ok = _compat(shapes, candidates, pools, bfits)
    return compat, bundle_ok


def _units(
    shapes: Sequence[PodShape],
    wanted: list[int],
    sizes: tuple[np.ndarray, np.ndarray],
    fits: tuple[np.ndarray, np.ndarray],
    plan: Plan,
) -> tuple[np.ndarray, np.ndarray]:
    """Per shape the pods of one planned unit (a bundle that shares a node, else 1) and
    whether its pods must share one zone. A shape planned in bundles takes the bundle's size
    and compatibility in place (``sizes``: a pod's and a bundle's; ``fits``: ``compat`` and
    ``bundle_ok``); one no candidate holds is unplaceable with the reason."""
    ssize, bsize = sizes
    compat, bundle_ok = fits
    unit = np.ones(len(shapes), np.int64)
    one_zone = np.zeros(len(shapes), bool)
    for i, s in enumerate(shapes):
        if s.domain is None or wanted[i] <= 1:
            continue  # a single pod is in one domain of every level
        if s.domain == ZONE_LABEL:
            one_zone[i] = s.domain_required
            continue
        if wanted[i] > 1 and (bundle_ok[i].any() or s.domain == HOSTNAME_LABEL):
            if s.domain_required or bundle_ok[i].any():
                single = bool(compat[i].any())
                unit[i] = wanted[i]
                ssize[i], compat[i] = bsize[i], bundle_ok[i]
                if not compat[i].any() and single:
                    plan.unplaceable[i] = Keyed(
                        f"no instance type a pool may launch holds all {s.count} pods on one "
                        f"node (required topology {s.domain})",
                        ("none-holds-all-on-one-node", s.domain),
                    )
        elif s.domain_required:
            one_zone[i] = True
    return unit, one_zone


def _placeable(
    shapes: Sequence[PodShape],
    compat: np.ndarray,
    pools: Sequence[NodePool],
    catalog: Catalog,
    plan: Plan,
) -> list[int]:
    """The shapes with pods some candidate holds, none of a gang with an unplaceable member;
    each other shape with pods gets its reason in ``plan.unplaceable``."""
    placeable = [
        i
        for i, s in enumerate(shapes)
        if s.count > 0 and compat[i].any() and i not in plan.unplaceable
    ]
    for i, s in enumerate(shapes):
        if s.count > 0 and not compat[i].any() and i not in plan.unplaceable:
            plan.unplaceable[i] = why_unplaceable(s, pools, catalog)
    for gang, members in gang_members(shapes).items():
        broken = [i for i in members if i in plan.unplaceable]
        if broken:
            for i in members:
                if shapes[i].count > 0 and i not in plan.unplaceable:
                    plan.unplaceable[i] = gang_not_planned(
                        gang, broken[0], plan.unplaceable[broken[0]]
                    )
            placeable = [i for i in placeable if i not in members]
    return placeable


def _zone_prices(
    shape: PodShape,
    size: np.ndarray,
    ok: np.ndarray,
    cap: np.ndarray,
    price: np.ndarray,
    zone_mask: Mapping[str, np.ndarray],
) -> dict[str, float]:
    """Per zone, the cheapest price per pod of ``shape`` (pods of ``size`` on candidates
    ``ok``), for a zone-spread or one-zone shape; else none."""
    zone_prices: dict[str, float] = {}
    if shape.zone_spread or shape.same_zone:
        per_node = np.floor_divide(cap, np.maximum(size, 1)).min(axis=1)
        per_node = np.minimum(per_node, min(shape.max_per_node or shape.count, shape.count))
        per_pod = np.where(ok, price / np.maximum(per_node, 1), np.inf)
        for z, mask in zone_mask.items():
            best = float(per_pod[mask].min(initial=np.inf))
            if np.isfinite(best):
                zone_prices[z] = best
    return zone_prices


def _items(
    shapes: Sequence[PodShape],
    placeable: list[int],
    planned: tuple[np.ndarray, np.ndarray],
    arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    zone_mask: Mapping[str, np.ndarray],
) -> tuple[list[Item], dict[int, list[str]]]:
    """The items of the placeable shapes (one per zone when zonal, in planned units) and the
    zones each zonal shape may use (``planned``: ``unit`` and ``one_zone``; ``arrays``: pod
    sizes, compatibility, capacities and prices)."""
    unit, one_zone = planned
    ssize, compat, cap, price = arrays
    items: list[Item] = []
    domains: dict[int, list[str]] = {}
    for i in placeable:
        shape = shapes[i]
        if unit[i] > 1 or one_zone[i]:
            shape = replace(
                shape,
                count=shape.count // int(unit[i]),
                same_zone=bool(one_zone[i]) or shape.same_zone,
                max_per_node=None if unit[i] > 1 else shape.max_per_node,
            )
        zone_prices = _zone_prices(shape, ssize[i], compat[i], cap, price, zone_mask)
        if shape.zone_spread or shape.same_zone:
            domains[i] = sorted(zone_prices)
        items.extend(split_items(i, shape, zone_prices))
    return items, domains


def _kept(
    candidates: list[Candidate],
    item_allowed: np.ndarray,
    cap: np.ndarray,
    obj: np.ndarray,
    limit_matrix: np.ndarray,
) -> np.ndarray:
    """The candidates worth keeping, in order: of those with the same pool and type, items
    and limit use only the cheapest offering, and none another dominates."""
    cheapest: dict[tuple[object, ...], int] = {}
    packed = np.packbits(item_allowed.T, axis=1)
    for j in np.argsort(obj, kind="stable").tolist():
        c = candidates[j]
        same = (c.pool, c.instance.name, packed[j].tobytes(), limit_matrix[:, j].tobytes())
        cheapest.setdefault(same, j)
    keep = np.array(sorted(cheapest.values()), np.int64)
    dead = _dominated(item_allowed[:, keep], cap[keep], obj[keep], limit_matrix[:, keep])
    kept: np.ndarray = keep[~dead]
    return kept


def _classes(
    items: list[Item], ssize: np.ndarray, item_allowed: np.ndarray
) -> tuple[list[Item], list[str], list[list[int]]]:
    """Items that pack identically merged into classes: the items (a gang that is one bundle,
    one item of one unit, is all-or-nothing by itself, so it keeps no gang), the gangs' names
    and each class's items."""
    gang_items: dict[str, list[Item]] = {}
    for it in items:
        if it.gang is not None:
            gang_items.setdefault(it.gang, []).append(it)
    gang_names = sorted(g for g, its in gang_items.items() if len(its) > 1 or its[0].count > 1)
    items = [
        it if it.gang is None or it.gang in gang_names else replace(it, gang=None) for it in items
    ]
    class_of: dict[tuple[object, ...], int] = {}
    class_items: list[list[int]] = []
    for k, it in enumerate(items):
        key = (
            it.shape if it.max_per_node is not None else None,
            ssize[it.shape].tobytes(),
            item_allowed[k].tobytes(),
            it.gang,
        )
        if key not in class_of:
            class_of[key] = len(class_items)
            class_items.append([])
        class_items[class_of[key]].append(k)
    return items, gang_names, class_items


def build_problem(
    shapes: Sequence[PodShape],
    pools: Sequence[NodePool],
    catalog: Catalog,
    offerings: Sequence[Offering],
    pool_usage: Mapping[str, Mapping[str, int]],
    account: AccountLimits | None,
    running: Sequence[Instance],
    plan: Plan,
) -> Problem | None:
    """The problem in arrays, or None when no shape can be planned (each unplaceable shape's
    reason goes to ``plan.unplaceable``)."""
    pools_by_name = {p.name: p for p in pools}
    candidates = offering_candidates(pools, catalog, offerings, account)
    resources = sorted({name for s in shapes for name, _ in s.requests} | {"pods"})
    wanted, ssize, bsize, cap = _sizes(shapes, candidates, resources)
    compat, bundle_ok = _compatibility(
        shapes, candidates, pools_by_name, wanted, (ssize, bsize, cap)
    )
    unit, one_zone = _units(shapes, wanted, (ssize, bsize), (compat, bundle_ok), plan)
    placeable = _placeable(shapes, compat, pools, catalog, plan)
    if not placeable:
        return None
    price = np.array([c.price for c in candidates], float)
    zones = np.array([c.offering.zone for c in candidates])
    zone_mask = {z: zones == z for z in sorted(set(zones.tolist()))}
    items, domains = _items(
        shapes, placeable, (unit, one_zone), (ssize, compat, cap, price), zone_mask
    )
    anywhere = np.ones(len(zones), bool)
    item_allowed = np.array(
        [
            compat[it.shape]
            & (anywhere if it.zone is None else zone_mask.get(it.zone, zones == it.zone))
            for it in items
        ]
    )
    usage = account_usage(account, running, catalog) if account is not None else {}
    limits = limit_rows(candidates, pools, pool_usage, account, usage)
    # free capacity (reservations) costs a token amount, so no plan launches it for nothing
    obj = np.where(price > 0, price, 1e-6 * max(1.0, float(price.max(initial=0.0))))
    keep = _kept(candidates, item_allowed, cap, obj, limits.matrix)
    candidates = [candidates[j] for j in keep]
    cap, price, obj, item_allowed = cap[keep], price[keep], obj[keep], item_allowed[:, keep]
    limits.matrix = limits.matrix[:, keep]
    items, gang_names, class_items = _classes(items, ssize, item_allowed)
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
        [
            unit[items[k].shape]
            * sum(v for r, v in shapes[items[k].shape].requests if is_accelerator(r))
            for k in first
        ],
        float,
    )
    return Problem(
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
        unit=unit,
        resources=tuple(resources),
    )
