"""Why pods are not planned: no pool offers a fitting type, or which limits block more nodes;
each reason keyed (:class:`~fleetshare.model.reason.Keyed`) where it is composed here."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from fleetshare.autoscaling.account_limits import describe_row, nodes_within
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner.candidates import fits_count
from fleetshare.autoscaling.topology import PodShape
from fleetshare.model.catalog import Catalog
from fleetshare.model.reason import Keyed

if TYPE_CHECKING:
    from fleetshare.autoscaling.provisioner.packing import Packing
    from fleetshare.autoscaling.provisioner.problem import Problem

NOT_PLANNED = Keyed("no node could be planned for them within the work budget", ("not-planned",))
"""Why pods are left out when no limit blocks them."""


def blocking_reason(p: Problem, pack: Packing, c: int) -> Keyed:
    """Which limits keep another node for class ``c`` from being planned; keyed by each
    limit (:attr:`LimitRows.keys`) with the instance types it blocks."""
    L = p.limits.matrix
    fits = np.flatnonzero(p.fit[c] > 0)
    fallback = NOT_PLANNED
    if not len(L) or not len(fits):
        return fallback
    planned = L[:, pack.cand[: pack.n]].sum(axis=1)
    blocked: dict[int, list[str]] = {}
    for j in fits:
        rows = np.flatnonzero(nodes_within(L[:, [j]], pack.head)[:, 0] == 0)
        if not len(rows):
            return fallback
        for row in rows.tolist():
            blocked.setdefault(row, []).append(p.candidates[j].instance.name)
    parts = []
    gist: list[Hashable] = ["limits-block"]
    for k, types in blocked.items():
        names = sorted(set(types))
        shown = ", ".join(names[:4]) + (f" (+{len(names) - 4} more)" if len(names) > 4 else "")
        parts.append(f"{describe_row(p.limits, k, float(planned[k]))} blocks {shown}")
        gist.append((p.limits.keys[k], tuple(names)))
    return Keyed("; ".join(parts), tuple(gist))


def why_unplaceable(shape: PodShape, pools: Sequence[NodePool], catalog: Catalog) -> Keyed:
    """Why no candidate holds a pod of ``shape``: no type a pool may launch is large enough,
    or none that is offers what the pod asks (selector, tolerations, zones, capacity types)."""
    req = shape.request()
    biggest = [
        inst.name
        for inst in catalog
        if any(p.allows(inst) for p in pools) and fits_count(req, inst.allocatable) >= 1
    ]
    if not biggest:
        return Keyed(
            "no instance type any node pool may launch is large enough for one pod",
            ("no-type-large-enough",),
        )
    return Keyed(
        "no node pool offers a fitting instance type that matches the pod's node selector, "
        "tolerations, zones and capacity types (or its offerings are unavailable)",
        ("no-fitting-offering",),
    )


def not_planned(left: int, count: int, why: Keyed) -> Keyed:
    """``left`` of a shape's ``count`` pods are not planned, for ``why``."""
    return Keyed(f"{left} of {count} pods not planned: {why}", ("pods-not-planned", why.gist))


def gang_not_planned(gang: str, shape: int, why: Keyed) -> Keyed:
    """No pod of ``gang`` is planned, since its shape ``shape`` cannot be in full, for
    ``why`` (the shape's index is a position in the batch: not part of the key)."""
    return Keyed(
        f"gang '{gang}' cannot be planned in full, so none of it is: shape {shape}: {why}",
        ("gang-not-planned", gang, why.gist),
    )
