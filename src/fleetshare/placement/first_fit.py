"""First fit of pods into the free room of nodes, in the order given.

The one first-fit used outside governance's vectorised gang placement (``fit.py``): the
autoscaler counts which pending pods fit on Ready and launching nodes before buying more, and
disruption checks that evicted pods fit elsewhere (first fit decreasing: the caller sorts the
pods). Whether a pod may run on a node is :func:`~fleetshare.placement.predicate.may_run_on`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from fleetshare.model.node import Node, NodeSelectorRequirement, Taint, Toleration
from fleetshare.model.resources import fits
from fleetshare.placement.predicate import may_run_on
from fleetshare.placement.topology import Domain, domain_of, levels_up_to


@dataclass
class Room:
    """Free resources (milli-units) of one node, reduced as pods are placed."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    free: dict[str, int]
    node: Node | None = field(default=None, compare=False)

    @classmethod
    def of(cls, node: Node, free: Mapping[str, int] | None = None) -> Room:
        """A node's room: ``free`` if given, else its whole allocatable."""
        room = dict(node.allocatable if free is None else free)
        return cls(node.name, node.all_labels(), node.taints, room, node)

    def takes(self, requests: Mapping[str, int]) -> bool:
        """The requests fit in the free room."""
        return fits(requests, self.free)

    def room_for(self, requests: Mapping[str, int], most: int) -> int:
        """How many pods of ``requests`` (at most ``most``) fit in the free room."""
        n = most
        for resource, value in requests.items():
            if value > 0:
                n = min(n, max(0, self.free.get(resource, 0)) // value)
        return n

    def take(self, requests: Mapping[str, int], count: int = 1) -> None:
        """Use the room of ``count`` pods."""
        for resource, value in requests.items():
            self.free[resource] = self.free.get(resource, 0) - value * count


def _room_for(requests: Mapping[str, int], free: Mapping[str, int]) -> int:
    """How many pods of ``requests`` fit in ``free`` (a large number when they ask nothing)."""
    counts = [free.get(name, 0) // amount for name, amount in requests.items() if amount > 0]
    return min(counts) if counts else 1 << 62


def first_fit(
    rooms: Sequence[Room],
    requests: Mapping[str, int],
    count: int,
    node_selector: Mapping[str, str],
    tolerations: Iterable[Toleration] = (),
    affinity: Iterable[tuple[NodeSelectorRequirement, ...]] = (),
) -> list[tuple[Room, int]]:
    """Place up to ``count`` identical pods, each on the first room that admits it and has
    room; the rooms are reduced. Returns (room, pods placed there) in room order."""
    tolerations, affinity = tuple(tolerations), tuple(affinity)
    placed: list[tuple[Room, int]] = []
    left = count
    for room in rooms:
        if left == 0:
            break
        if not room.takes(requests):
            continue
        if not may_run_on(room.labels, room.taints, node_selector, tolerations, affinity):
            continue
        here = min(left, _room_for(requests, room.free))  # as many as fit, at once
        room.take(requests, here)
        left -= here
        placed.append((room, here))
    return placed


def first_fit_together(
    rooms: Sequence[Room],
    requests: Mapping[str, int],
    count: int,
    node_selector: Mapping[str, str],
    tolerations: Iterable[Toleration] = (),
    affinity: Iterable[tuple[NodeSelectorRequirement, ...]] = (),
    level: str | None = None,
    required: bool = True,
) -> list[tuple[Room, int]]:
    """:func:`first_fit` for a pod set that must (``required``) or would like to stay in one
    domain of ``level`` (:mod:`.topology`): all ``count`` pods in the first domain, in room
    order, of the tightest level that holds them all. A required level places nothing when no
    domain holds them all; a preferred one falls back to plain first fit."""
    if level is None:
        return first_fit(rooms, requests, count, node_selector, tolerations, affinity)
    tolerations, affinity = tuple(tolerations), tuple(affinity)
    ok = [r for r in rooms if may_run_on(r.labels, r.taints, node_selector, tolerations, affinity)]
    room = [r.room_for(requests, count) for r in ok]
    for lv in levels_up_to(level):
        totals: dict[Domain, int] = {}
        for r, n in zip(ok, room, strict=True):
            key = domain_of(r.labels, lv, r.name)
            totals[key] = totals.get(key, 0) + n
        for key, total in totals.items():
            if total >= count:
                inside = [r for r in ok if domain_of(r.labels, lv, r.name) == key]
                return first_fit(inside, requests, count, node_selector, tolerations, affinity)
    if required:
        return []
    return first_fit(rooms, requests, count, node_selector, tolerations, affinity)
