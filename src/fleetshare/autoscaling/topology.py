"""Pod topology for the provisioner: pod shapes with zone/host constraints and gangs.

A :class:`PodShape` is ``count`` identical pending pods. Besides requests, node selector and
tolerations it may carry the scheduling constraints Karpenter honours when it creates nodes:

- ``zone_spread``: a ``topologySpreadConstraint`` on ``topology.kubernetes.io/zone`` with
  ``maxSkew: 1`` and ``whenUnsatisfiable: DoNotSchedule``. The pods are split over the zones the
  shape can be launched in (zones where some compatible pool/instance type has an available
  offering) so that the zone counts, *including* the shape's pods already running there
  (``zone_counts``), differ by at most one; when the existing counts are already further apart,
  new pods only go to the emptiest zones (levelling), as the scheduler would.
- ``max_per_node``: at most this many of the shape's pods on one *new* node. Hostname pod
  anti-affinity is ``1``; a hostname topology spread with ``maxSkew: 1`` is also ``1`` on new
  nodes (every new node is a new domain with zero pods, so Karpenter never puts two there).
- ``same_zone``: zonal pod self-affinity: every pod of the shape in one zone. The zone is the
  zone where the shape's pods already run (``zone_counts``), else the zone of the cheapest
  candidate for the shape (lowest price per pod of the shape on one node, ties by zone name).
  This is a simple rule, not a joint optimisation over zones.
- ``gang``: shapes with the same gang id are provisioned together or not at all.
- ``domain``: a topology level (:mod:`fleetshare.placement.topology`) all the shape's pods
  must share (``domain_required``) or would like to. The pods of a hostname domain are one
  *bundle*, planned onto one node (an 8 x 1-GPU gang gets one 8-GPU node); a zone domain is
  ``same_zone``; any other level (a network block, which a new node gets from the cloud, not
  from the plan) is a bundle when some instance type holds all the pods, else one zone. A
  preferred level whose bundle no instance type holds is planned without it.

Zone-constrained shapes become one *item* per zone (see :func:`split_items`); the optimiser packs
items, and :func:`spread_cap` checks a partially placed spread (when limits bind) still keeps the
skew. Everything here is pure and small; the optimisation lives in ``provisioner.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fleetshare.model.node import ZONE_LABEL, NodeSelectorRequirement, Toleration
from fleetshare.placement.gpu_slots import counted_requests


@dataclass(frozen=True, slots=True)
class PodShape:
    """``count`` identical pending pods (of admissible workloads) and their constraints."""

    requests: tuple[tuple[str, int], ...]
    count: int
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    affinity: tuple[tuple[NodeSelectorRequirement, ...], ...] = ()
    """Required node affinity (see :mod:`fleetshare.placement.predicate`)."""
    workloads: tuple[str, ...] = ()
    zone_spread: bool = False
    """Spread over zones, maxSkew 1 (DoNotSchedule)."""
    max_per_node: int | None = None
    """At most this many of these pods on one new node (hostname anti-affinity: 1)."""
    same_zone: bool = False
    """All pods in one zone (zonal pod self-affinity)."""
    gang: str | None = None
    """All shapes with this gang id are planned in full, or none of them."""
    zone_counts: tuple[tuple[str, int], ...] = ()
    """Pods of this shape's group already running, per zone (for spread and affinity)."""
    headroom: bool = False
    """Warm room the autoscaler keeps, not pods of any workload."""
    domain: str | None = None
    """A topology level all these pods share (see the module docstring)."""
    domain_required: bool = True
    """``domain`` is required (Kueue's required topology), not only preferred."""

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError(f"pod count must be >= 0, got {self.count}")
        if self.max_per_node is not None and self.max_per_node < 1:
            raise ValueError(f"max_per_node must be >= 1, got {self.max_per_node}")
        if self.domain is not None and self.zone_spread:
            raise ValueError("a shape cannot both spread over zones and share a domain")
        if self.zone_spread and self.same_zone:
            raise ValueError("a shape cannot both spread over zones and stay in one zone")

    def request(self) -> dict[str, int]:
        """One pod's requests as the provisioner packs them (a GPU share counted at its
        :func:`~fleetshare.placement.gpu_slots.share_footprint`)."""
        return counted_requests(dict(self.requests))

    @property
    def selected_zone(self) -> str | None:
        """The zone a node selector pins the pods to, if any."""
        return dict(self.node_selector).get(ZONE_LABEL)

    @property
    def zonal(self) -> bool:
        """True when the shape's pods need per-zone decisions."""
        return self.zone_spread or self.same_zone or self.selected_zone is not None


@dataclass(frozen=True, slots=True)
class Item:
    """Pods of one shape the optimiser places together: in one zone, or in any zone."""

    shape: int
    zone: str | None
    """None: any zone the shape's candidates offer."""
    count: int
    max_per_node: int | None
    gang: str | None


def spread_counts(count: int, zones: Sequence[str], existing: Mapping[str, int]) -> dict[str, int]:
    """Split ``count`` new pods over ``zones`` (in preference order) with maxSkew 1.

    Each pod goes to the zone with the fewest pods (existing + new), ties to the earlier zone in
    ``zones``. The result's zone totals differ by at most one whenever the existing counts allow.
    """
    total = {z: existing.get(z, 0) for z in zones}
    added = dict.fromkeys(zones, 0)
    rank = {z: i for i, z in enumerate(zones)}
    # level whole rounds at once, then place the remainder one by one
    while count > 0:
        low = min(total.values())
        lowest = [z for z in zones if total[z] == low]
        higher = [v for v in total.values() if v > low]
        step = min(min(higher) - low if higher else count, count // len(lowest))
        if step > 0:
            for z in lowest:
                total[z] += step
                added[z] += step
            count -= step * len(lowest)
            continue
        for z in sorted(lowest, key=rank.__getitem__)[:count]:
            total[z] += 1
            added[z] += 1
        count = 0
    return added


def choose_zone(shape: PodShape, zone_prices: Mapping[str, float]) -> str:
    """The zone for a same-zone shape: where it already runs, else the cheapest per pod.

    ``zone_prices``: per launchable zone, the lowest price per pod of the shape on one node.
    """
    running = {z: n for z, n in shape.zone_counts if n > 0 and z in zone_prices}
    if running:
        return max(sorted(running), key=running.__getitem__)
    return min(sorted(zone_prices), key=zone_prices.__getitem__)


def split_items(shape_index: int, shape: PodShape, zone_prices: Mapping[str, float]) -> list[Item]:
    """The items of one placeable shape.

    ``zone_prices``: the zones the shape can be launched in, each with the lowest price per pod
    of the shape there (used to choose the zone of a same-zone shape and, for a spread, which
    zones get the extra pod when the count does not divide evenly).
    """
    cap, gang = shape.max_per_node, shape.gang
    if shape.zone_spread:
        order = sorted(zone_prices, key=lambda z: (zone_prices[z], z))
        counts = spread_counts(shape.count, order, dict(shape.zone_counts))
        return [Item(shape_index, z, n, cap, gang) for z, n in sorted(counts.items()) if n > 0]
    if shape.same_zone:
        return [Item(shape_index, choose_zone(shape, zone_prices), shape.count, cap, gang)]
    return [Item(shape_index, shape.selected_zone, shape.count, cap, gang)]


def spread_cap(placed: Mapping[str, int], existing: Mapping[str, int]) -> dict[str, int]:
    """How many of ``placed`` (new pods per zone) a spread may keep when some zones fell short.

    The scheduler lets a pod into a zone only while that zone has at most one pod more than the
    emptiest zone, so a zone that received pods may end at most one above the final minimum
    (existing pods included). Returns the kept count per zone (never more than placed).
    """
    final = {z: existing.get(z, 0) + n for z, n in placed.items()}
    if not final:
        return {}
    floor = min(final.values()) + 1
    return {z: max(0, min(n, floor - existing.get(z, 0))) if n else 0 for z, n in placed.items()}


def gang_members(shapes: Sequence[PodShape]) -> dict[str, list[int]]:
    """Gang id -> indices of its shapes."""
    out: dict[str, list[int]] = {}
    for i, shape in enumerate(shapes):
        if shape.gang is not None:
            out.setdefault(shape.gang, []).append(i)
    return out
