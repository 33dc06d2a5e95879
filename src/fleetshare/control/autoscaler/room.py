"""Free room on nodes, as provisioning, headroom and disruption count it: where running work
sits, what is left on Ready and launching nodes, and how many pods fit there first fit."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from fleetshare.control.autoscaler.nodes import NodeBook
from fleetshare.governance.snapshot import Running, Snapshot
from fleetshare.model.workload import PodSet
from fleetshare.placement.first_fit import Room, first_fit_together
from fleetshare.placement.topology import constraint


def first_fit(
    podset: PodSet,
    selector: Mapping[str, str],
    count: int,
    free: Sequence[Room],
    used: set[str] | None = None,
) -> int:
    """Place up to ``count`` pods of ``podset`` onto ``free`` room (taken); how many fit
    (the nodes they went to are added to ``used``)."""
    level, required = constraint(podset.required_topology, podset.preferred_topology)
    placed = first_fit_together(
        free,
        podset.requests,
        count,
        selector,
        podset.tolerations,
        podset.affinity,
        level if count == podset.count else None,  # the rest of a set already split
        required,
    )
    if used is not None:
        used.update(room.name for room, _ in placed)
    return sum(n for _, n in placed)


def pods_on(running: Mapping[str, Running]) -> dict[str, list[Running]]:
    """Node -> the running workloads with pods on it."""
    out: dict[str, list[Running]] = {}
    for entry in running.values():
        for placement in entry.assignment.placement:
            for node, _ in placement:
                bucket = out.setdefault(node, [])
                if not bucket or bucket[-1] is not entry:
                    bucket.append(entry)
    return out


def take_placed(
    rooms: dict[str, dict[str, int]], running: Iterable[Running]
) -> list[tuple[PodSet, int, str]]:
    """Take what running work's pods request from the room of the nodes they run on (node
    name -> free amounts, changed in place); the (pod set, pods, node) placed on nodes not in
    ``rooms``, in the order met."""
    elsewhere: list[tuple[PodSet, int, str]] = []
    for entry in running:
        for podset, placement in zip(
            entry.workload.podsets, entry.assignment.placement, strict=True
        ):
            for node, count in placement:
                room = rooms.get(node)
                if room is None:
                    elsewhere.append((podset, count, node))
                    continue
                for resource, value in podset.requests.items():
                    room[resource] = room.get(resource, 0) - value * count
    return elsewhere


def free_room(snapshot: Snapshot, book: NodeBook) -> list[Room]:
    """Room on Ready nodes and on nodes still launching (less what they were launched
    for): demand that fits there needs no new node."""
    room = {n.name: dict(n.allocatable) for n in snapshot.nodes if n.schedulable}
    take_placed(room, snapshot.running)
    out = [Room.of(n, room[n.name]) for n in snapshot.nodes if n.name in room]
    launching = [Room.of(m.node) for m in book.live() if not m.joined]
    pending = {wl.name: wl for wl in snapshot.pending}
    for name in dict.fromkeys(w for names, _ in book.launching_groups() for w in names):
        wl = pending.get(name)  # each workload once, however many nodes it waits for
        if wl is not None:
            for podset in wl.podsets:
                first_fit(podset, podset.node_selector, podset.count, launching)
    return out + launching


def room_without(book: NodeBook, gone: set[str], running: Iterable[Running]) -> list[Room]:
    """The free room on the managed nodes once ``gone`` are removed and the pods on them
    have moved into the room left (first fit)."""
    free = [Room.of(m.node) for m in book.live() if m.name not in gone]
    rooms = {room.name: room.free for room in free}
    for podset, count, node in take_placed(rooms, running):
        if node in gone:  # the pods on the nodes removed move into the room left
            first_fit(podset, podset.node_selector, count, free)
    return free
