"""Why pods are not planned: no pool offers a fitting type, or which limits block more nodes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from fleetshare.autoscaling.account_limits import describe_row, nodes_within
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner.candidates import fits_count
from fleetshare.autoscaling.topology import PodShape
from fleetshare.model.catalog import Catalog

if TYPE_CHECKING:
    from fleetshare.autoscaling.provisioner.packing import Packing
    from fleetshare.autoscaling.provisioner.problem import Problem

NOT_PLANNED = "no node could be planned for them within the work budget"
"""Why pods are left out when no limit blocks them."""


def blocking_reason(p: Problem, pack: Packing, c: int) -> str:
    """Which limits keep another node for class ``c`` from being planned."""
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
    for k, types in blocked.items():
        names = sorted(set(types))
        shown = ", ".join(names[:4]) + (f" (+{len(names) - 4} more)" if len(names) > 4 else "")
        parts.append(f"{describe_row(p.limits, k, float(planned[k]))} blocks {shown}")
    return "; ".join(parts)


def why_unplaceable(shape: PodShape, pools: Sequence[NodePool], catalog: Catalog) -> str:
    req = shape.request()
    biggest = [
        inst.name
        for inst in catalog
        if any(p.allows(inst) for p in pools) and fits_count(req, inst.allocatable) >= 1
    ]
    if not biggest:
        return "no instance type any node pool may launch is large enough for one pod"
    return (
        "no node pool offers a fitting instance type that matches the pod's node selector, "
        "tolerations, zones and capacity types (or its offerings are unavailable)"
    )
