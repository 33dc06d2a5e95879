"""Pending work grouped by *shape*, kept across cycles, and the lazily built pending result.

A shape is what a failed admission attempt depends on: the team, the priority and the pod
sets (names, counts, requests, node selectors, tolerations, node affinity, topology, the
count partial admission may go down to), plus the submit
time for teams whose preemption rule compares submit times. Within one cycle, two workloads of
the same shape meet the same state the same way: if one fails while nothing has changed since
(no admission or preemption), the other fails too, for the same reason (see
``governance/cycle.py``).

:class:`PendingIndex` keeps each shape's members sorted in queue order (priority, then FIFO)
and updates them from one snapshot to the next by difference; a list is copied before it is
changed, so the lists a cycle saw stay valid for its result. :class:`PendingMap` is a cycle's
``pending`` result: workloads considered one by one carry their own reason, the rest carry
their shape's reason; positions are computed on demand.
"""

from __future__ import annotations

import heapq
import itertools
import operator
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from fleetshare.governance.preemption_cache import Attempt
from fleetshare.governance.quota import FR, QuotaModel
from fleetshare.governance.snapshot import Pending
from fleetshare.model.reason import Gist, PendingReason
from fleetshare.model.workload import Workload
from fleetshare.policy.schema import PreemptTeamTasks

T = TypeVar("T")

QueueKey = tuple[int, float, int, str]
_uids = itertools.count()
ShapeKey = tuple[object, ...]


def reason_gist(reason: PendingReason) -> Gist:
    """A pending reason without its amounts: the key its composer gave it
    (:data:`~fleetshare.model.reason.Gist`), what tells a new reason from the same one with
    other numbers (usage moving under a waiting workload changes only those), for whoever
    reports reasons (the runner's log, the service's changes, the operator's annotations)."""
    return reason.gist


def new_in_substance(before: PendingReason | None, after: PendingReason) -> bool:
    """Whether reason ``after`` says something new after ``before`` (None: none before), not
    only other numbers (their keys differ): when the runner logs a reason and the service
    records it."""
    return before is None or (before != after and before.gist != after.gist)


def queue_key(wl: Workload) -> QueueKey:
    """Order within a team's queue: priority, then FIFO (submission time, then creation
    order; the name only keeps the order total for workloads a caller made with equal
    creation numbers)."""
    return (-wl.priority, wl.submit_time, wl.created, wl.name)


@dataclass(slots=True, eq=False)
class Shape:
    """Pending workloads of one shape, in queue order (parallel lists)."""

    key: ShapeKey
    team: str
    uid: int = field(default_factory=lambda: next(_uids))
    """Names the shape in caches (cheaper to hash than its key; never reused)."""
    keys: list[QueueKey] = field(default_factory=list)
    wls: list[Workload] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    attempt: Attempt | None = None
    """Its preemption search's terms (the same for every member)."""
    usages: dict[str | tuple[str, ...], dict[FR, int]] = field(default_factory=dict)
    """Per flavor, what a member asks for with every pod set there; per tuple of flavors (a
    flavor per pod set), what it asks for with pod set i on the i-th (kept with the shape)."""
    podset_usages: dict[tuple[int, str], dict[FR, int]] = field(default_factory=dict)
    """Per (pod set index, flavor), what that pod set alone asks for there."""


def shape_key(wl: Workload, by_submit: bool, by_queue: bool = False) -> ShapeKey:
    podsets = tuple(
        (
            ps.name,
            ps.count,
            tuple(ps.requests.items()),
            tuple(ps.node_selector.items()),
            ps.tolerations,
            ps.affinity,
            ps.required_topology,
            ps.preferred_topology,
            ps.min_count,
        )
        for ps in wl.podsets
    )
    return (
        wl.team,
        wl.priority,
        podsets,
        wl.submit_time if by_submit else None,
        wl.queue if by_queue else None,
    )


class PendingIndex:
    """The pending workloads of the latest snapshot, by shape (see the module docstring)."""

    def __init__(self) -> None:
        self.model: QuotaModel | None = None
        self.shapes: dict[ShapeKey, Shape] = {}
        self.of: dict[int, tuple[Shape, QueueKey, Workload]] = {}
        """By ``id()`` of each pending workload: its shape and queue key (see :meth:`entry`)."""
        self._ids: set[int] = set()
        self._view: tuple[object, int] | None = None
        self.by_name: dict[str, tuple[Shape, QueueKey, Workload]] = {}
        # what the previous cycle reported, to tell which reasons changed
        self.last_explicit: dict[str, PendingReason] = {}
        self.last_bulk: dict[int, dict[PendingReason, set[str]]] = {}
        """Per shape uid and reason: who was given that reason in bulk."""

    def entry(self, wl: Workload) -> tuple[Shape, QueueKey, Workload]:
        """A pending workload's shape and queue key."""
        return self.of[id(wl)]

    def update(self, model: QuotaModel, pending: Sequence[Workload]) -> None:
        """Follow the snapshot's pending workloads (matched by identity). A
        :class:`PendingView` that continues the previous one says what changed; anything
        else is compared in full."""
        if model is not self.model:
            self.model = model
            self.shapes = {}
            self.of = {}
            self._ids = set()
            self.by_name = {}
            self.last_explicit = {}
            self.last_bulk = {}
            self._view = None
        of = self.of
        view = self._view
        self._view = None
        if (
            isinstance(pending, PendingView)
            and view is not None
            and pending.source is view[0]
            and pending.serial == view[1] + 1
        ):
            last: dict[int, tuple[bool, Workload]] = {}
            for present, wl in pending.changes:
                last[id(wl)] = (present, wl)
            gone = {i for i, (present, _) in last.items() if not present and i in of}
            arrived = {i: wl for i, (present, wl) in last.items() if present and i not in of}
            self._apply(model, gone, list(arrived.values()))
            self._ids -= gone
            self._ids |= arrived.keys()
            if len(of) != len(pending):  # not what the view said: compare in full
                self._ids = set(of)
                self.update(model, list(pending))
        else:
            ids = set(map(id, pending))
            gone = self._ids - ids
            new = ids - self._ids
            self._ids = ids
            self._apply(model, gone, _newest_first(pending, new) if new else [])
        if isinstance(pending, PendingView):
            self._view = (pending.source, pending.serial)

    def _apply(self, model: QuotaModel, gone: set[int], arrived: list[Workload]) -> None:
        of = self.of
        copied: set[int] = set()

        def own(shape: Shape) -> None:
            if id(shape) not in copied:  # copy on write: earlier results keep their lists
                copied.add(id(shape))
                shape.keys = shape.keys.copy()
                shape.wls = shape.wls.copy()
                shape.names = shape.names.copy()

        for i in gone:
            shape, key, wl = of.pop(i)
            own(shape)
            at = bisect_left(shape.keys, key)
            while shape.wls[at] is not wl:  # equal keys only for a duplicate name
                at += 1
            del shape.keys[at]
            del shape.wls[at]
            del shape.names[at]
            if self.by_name.get(wl.name, (None, None, None))[2] is wl:
                del self.by_name[wl.name]
            if not shape.keys:
                del self.shapes[shape.key]
        if not arrived:
            return
        added: dict[int, list[tuple[QueueKey, Workload]]] = {}
        shapes: dict[int, Shape] = {}
        teams = model.teams
        for wl in arrived:
            rules = teams.get(wl.team)
            by_submit = (
                rules is not None
                and rules.preempt_team_tasks == PreemptTeamTasks.LOWER_OR_NEWER_EQUAL_PRIORITY
            )
            skey = shape_key(wl, by_submit, rules is not None and rules.by_queue)
            found = self.shapes.get(skey)
            if found is None:
                found = self.shapes[skey] = Shape(skey, wl.team)
                copied.add(id(found))
            shape = found
            key = queue_key(wl)
            of[id(wl)] = self.by_name[wl.name] = (shape, key, wl)
            shapes[id(shape)] = shape
            added.setdefault(id(shape), []).append((key, wl))
        for sid, items in added.items():
            shape = shapes[sid]
            own(shape)
            if len(items) <= 8:
                for key, wl in items:
                    at = bisect_left(shape.keys, key)
                    shape.keys.insert(at, key)
                    shape.wls.insert(at, wl)
                    shape.names.insert(at, wl.name)
            else:
                merged = sorted([*zip(shape.keys, shape.wls, strict=True), *items], key=_first)
                shape.keys = [k for k, _ in merged]
                shape.wls = [w for _, w in merged]
                shape.names = [w.name for w in shape.wls]


class PendingView(list[Workload]):
    """Pending workloads (a list) that also say what changed since the previous view from
    the same ``source``: ``changes`` lists (still pending?, workload) in the order things
    happened. A :class:`PendingIndex` given consecutive views applies the changes instead of
    comparing the whole lists."""

    __slots__ = ("changes", "serial", "source")

    def __init__(
        self,
        workloads: Iterable[Workload],
        source: object,
        serial: int,
        changes: list[tuple[bool, Workload]],
    ) -> None:
        super().__init__(workloads)
        self.source = source
        self.serial = serial
        self.changes = changes


class PendingBook(dict[str, Workload]):
    """A cluster's pending workloads by name, in arrival order, that remember what changed
    since the last :meth:`view`: the one place a runner or backend records pending changes
    for the engine's :class:`PendingIndex`. Change it only through :meth:`put` and
    :meth:`take` (a plain ``dict`` write would go unrecorded)."""

    __slots__ = ("_changes", "_serial")

    def __init__(self) -> None:
        super().__init__()
        self._changes: list[tuple[bool, Workload]] = []
        self._serial = 0

    def put(self, workload: Workload) -> None:
        """Make ``workload`` pending (replacing a pending one of the same name)."""
        replaced = self.get(workload.name)
        if replaced is not None:
            self._changes.append((False, replaced))
        self[workload.name] = workload
        self._changes.append((True, workload))

    def take(self, name: str) -> Workload | None:
        """Remove and return the pending workload ``name`` (None when it is not pending)."""
        workload = self.pop(name, None)
        if workload is not None:
            self._changes.append((False, workload))
        return workload

    def view(self, source: object) -> PendingView:
        """The pending workloads for a cycle, with the changes since the previous view."""
        self._serial += 1
        changes, self._changes = self._changes, []
        return PendingView(self.values(), source, self._serial, changes)


def same_nodes(nodes: tuple[T, ...], last: tuple[T, ...]) -> tuple[T, ...]:
    """``last`` when ``nodes`` holds the same objects in the same order (the engine's cache
    then knows at a glance that its node state still holds), else ``nodes``."""
    if len(nodes) == len(last) and all(map(operator.is_, nodes, last)):
        return last
    return nodes


def _newest_first(pending: Sequence[Workload], new: set[int]) -> list[Workload]:
    """The workloads of ``pending`` whose ids are in ``new``: looked for from the end, where
    a runner adds what arrives, until all are found (in any order: the result is the same)."""
    out: list[Workload] = []
    for wl in reversed(pending):
        if id(wl) in new:
            out.append(wl)
            if len(out) == len(new):
                break
    return out


def _first(item: tuple[QueueKey, Workload]) -> QueueKey:
    return item[0]


@dataclass(slots=True, eq=False)
class Stretch:
    """A sorted run of one shape's workloads in a queue: ``shape.wls[at:end]``."""

    shape: Shape
    at: int
    """The index of the next workload."""
    end: int


class Lane:
    """A team's queue in one cycle: a heap of :class:`Stretch` (a shape's members, or a run
    moved in from another queue), each under its next workload's queue key and with that
    workload. Pops come in queue order, as from one heap of all the workloads."""

    __slots__ = ("heap",)

    def __init__(self) -> None:
        self.heap: list[tuple[QueueKey, Workload, Stretch]] = []

    def add(self, shape: Shape, at: int, end: int) -> None:
        """Add the run ``shape.wls[at:end]`` (without restoring the heap order)."""
        self.heap.append((shape.keys[at], shape.wls[at], Stretch(shape, at, end)))

    def push(self, shape: Shape, at: int, end: int) -> None:
        """Add the run ``shape.wls[at:end]``."""
        heapq.heappush(self.heap, (shape.keys[at], shape.wls[at], Stretch(shape, at, end)))

    def heapify(self) -> None:
        heapq.heapify(self.heap)

    def __bool__(self) -> bool:
        return bool(self.heap)

    def head(self) -> Workload:
        return self.heap[0][1]

    def pop(self) -> None:
        """Take the head."""
        self._advance(self.heap[0][2].at + 1)

    def pop_run(self) -> tuple[Shape, int, int]:
        """Take the head and what follows it from the same run before any other run's head:
        the workloads single pops would take next, in a row, from that run."""
        heap = self.heap
        top = heap[0][2]
        shape, at, end = top.shape, top.at, top.end
        stop = end
        if len(heap) > 1:
            bound = heap[1][0] if len(heap) == 2 or heap[1][0] < heap[2][0] else heap[2][0]
            stop = bisect_left(shape.keys, bound, at + 1, end)
        self._advance(stop)
        return shape, at, stop

    def _advance(self, at: int) -> None:
        heap = self.heap
        top = heap[0][2]
        if at < top.end:
            top.at = at
            shape = top.shape
            heapq.heapreplace(heap, (shape.keys[at], shape.wls[at], top))
        else:
            heapq.heappop(heap)

    def remaining(self) -> Iterator[tuple[Shape, int]]:
        """(shape, first index) of what is left, stretch by stretch."""
        for _, _, stretch in self.heap:
            yield stretch.shape, stretch.at

    def stretches(self) -> list[Stretch]:
        """What is left, stretch by stretch (in heap order)."""
        return [stretch for _, _, stretch in self.heap]

    def rebuild(self, stretches: list[Stretch]) -> None:
        """Hold these stretches (positions moved on since) and nothing else."""
        self.heap = [(s.shape.keys[s.at], s.shape.wls[s.at], s) for s in stretches if s.at < s.end]
        heapq.heapify(self.heap)

    def clear(self) -> None:
        self.heap.clear()


class ScoredLane:
    """A team's queue ordered by a score of each workload's local queue first (admission fair
    sharing), then queue order; the same interface as :class:`Lane`. Scores change as the
    cycle admits: :meth:`reorder` then restores the order (shapes of such a team hold one
    local queue's work)."""

    __slots__ = ("heap", "score")

    def __init__(self, score: Callable[[Workload], float]) -> None:
        self.heap: list[tuple[tuple[float, QueueKey], Workload, Stretch]] = []
        self.score = score

    def _entry(self, stretch: Stretch) -> tuple[tuple[float, QueueKey], Workload, Stretch]:
        shape, at = stretch.shape, stretch.at
        wl = shape.wls[at]
        return ((self.score(wl), shape.keys[at]), wl, stretch)

    def add(self, shape: Shape, at: int, end: int) -> None:
        self.heap.append(self._entry(Stretch(shape, at, end)))

    def push(self, shape: Shape, at: int, end: int) -> None:
        heapq.heappush(self.heap, self._entry(Stretch(shape, at, end)))

    def heapify(self) -> None:
        heapq.heapify(self.heap)

    def reorder(self) -> None:
        """Scores changed: order again."""
        self.heap = [self._entry(stretch) for _, _, stretch in self.heap]
        heapq.heapify(self.heap)

    def __bool__(self) -> bool:
        return bool(self.heap)

    def head(self) -> Workload:
        return self.heap[0][1]

    def pop(self) -> None:
        top = self.heap[0][2]
        top.at += 1
        if top.at < top.end:
            heapq.heapreplace(self.heap, self._entry(top))
        else:
            heapq.heappop(self.heap)

    def pop_run(self) -> tuple[Shape, int, int]:
        """Take the head (one workload: the next may belong to another queue)."""
        top = self.heap[0][2]
        shape, at = top.shape, top.at
        self.pop()
        return shape, at, at + 1

    def remaining(self) -> Iterator[tuple[Shape, int]]:
        for _, _, stretch in self.heap:
            yield stretch.shape, stretch.at

    def stretches(self) -> list[Stretch]:
        return [stretch for _, _, stretch in self.heap]

    def rebuild(self, stretches: list[Stretch]) -> None:
        self.heap = [self._entry(s) for s in stretches if s.at < s.end]
        heapq.heapify(self.heap)

    def clear(self) -> None:
        self.heap.clear()


@dataclass(slots=True)
class Group:
    """Workloads settled in bulk: ``wls[start:end]``, one shape, one reason."""

    shape: int
    """The shape's ``uid``."""
    prefix: tuple[object, ...]
    """The cycle's merge key of these workloads without the queue key (same for a shape)."""
    keys: list[QueueKey]
    wls: list[Workload]
    names: list[str]
    start: int
    end: int
    reason: PendingReason


class Ordered(Protocol):
    """Part of a cycle in merge-key order: workloads attempted one by one (with their merge
    keys) and groups settled in bulk."""

    explicit: list[tuple[tuple[object, ...], str]]
    groups: list[Group]


class PendingMap(Mapping[str, Pending]):
    """A cycle's pending workloads with reasons and queue positions, built on demand.

    Iteration order is the order in which the cycle considered the workloads, as a plain
    dictionary filled one workload at a time would have it: ``segments`` are, in turn,
    names in the order considered, or parts gone through in merge-key order.
    """

    def __init__(
        self,
        explicit: dict[str, tuple[Workload, PendingReason]],
        segments: Sequence[list[str] | Ordered],
        groups: list[Group],
        team_keys: dict[str, list[list[QueueKey]]],
        admitted: dict[str, list[QueueKey]],
        known: dict[str, tuple[Workload, PendingReason]] | None = None,
    ) -> None:
        self._explicit = explicit
        self._known = known or {}
        """Entries of groups already looked up (by name)."""
        self._segments = segments
        self._groups = groups
        self._team_keys = team_keys
        self._admitted = admitted
        self._len = len(explicit) + sum(g.end - g.start for g in groups)
        self._grouped: dict[str, tuple[Group, int]] | None = None
        self._full: dict[str, Pending] | None = None
        self._merged: dict[str, list[QueueKey]] = {}
        """Per team, its shapes' queue keys in one sorted list (made on first use)."""

    def __len__(self) -> int:
        return self._len

    def _group_index(self) -> dict[str, tuple[Group, int]]:
        if self._grouped is None:
            self._grouped = {
                g.keys[i][-1]: (g, i) for g in self._groups for i in range(g.start, g.end)
            }
        return self._grouped

    def position(self, wl: Workload) -> int:
        """1 + the team's still-pending work ahead of ``wl`` (priority, then FIFO): what was
        pending and was not admitted (work evicted in the cycle counts from the next)."""
        key = queue_key(wl)
        merged = self._merged.get(wl.team)
        if merged is None:  # one list per team: a position is then one bisection, not one per shape
            lists = self._team_keys.get(wl.team, [])
            merged = lists[0] if len(lists) == 1 else sorted(k for keys in lists for k in keys)
            self._merged[wl.team] = merged
        ahead = bisect_left(merged, key) - bisect_left(self._admitted.get(wl.team, []), key)
        return ahead + 1

    def _entry(self, name: str) -> tuple[Workload, PendingReason] | None:
        """``name``'s workload and reason, before materializing (None: not pending)."""
        found = self._explicit.get(name) or self._known.get(name)
        if found is not None:
            return found
        located = self._group_index().get(name)
        if located is None:
            return None
        group, i = located
        return group.wls[i], group.reason

    def __getitem__(self, name: str) -> Pending:
        if self._full is not None:
            return self._full[name]
        entry = self._entry(name)
        if entry is None:
            raise KeyError(name)
        return Pending(entry[0], entry[1], self.position(entry[0]))

    def reason(self, name: str) -> PendingReason | None:
        """Why ``name`` waits (None: it is not pending): ``self[name].reason`` without
        computing its queue position."""
        if self._full is not None:
            full = self._full.get(name)
            return None if full is None else full.reason
        entry = self._entry(name)
        return None if entry is None else entry[1]

    def __contains__(self, name: object) -> bool:
        if self._full is not None:
            return name in self._full
        return name in self._explicit or name in self._group_index()

    def order(self) -> list[tuple[Workload, PendingReason]]:
        """Every pending workload with its reason, in the order the cycle met them."""
        out: list[tuple[Workload, PendingReason]] = []
        explicit = self._explicit
        for segment in self._segments:
            if isinstance(segment, list):
                out += [explicit[name] for name in segment]
                continue
            items: list[tuple[tuple[object, ...], Workload, PendingReason]] = [
                (key, *explicit[name]) for key, name in segment.explicit
            ]
            items += [
                (g.prefix + g.keys[i], g.wls[i], g.reason)
                for g in segment.groups
                for i in range(g.start, g.end)
            ]
            items.sort(key=_merge_key)
            out += [(wl, reason) for _, wl, reason in items]
        return out

    def materialize(self) -> dict[str, Pending]:
        """Every entry as a plain dictionary, in the cycle's order."""
        if self._full is None:  # positions as on demand: one rule (:meth:`position`)
            self._full = {wl.name: Pending(wl, r, self.position(wl)) for wl, r in self.order()}
        return self._full

    def __iter__(self) -> Iterator[str]:
        return iter(self.materialize())

    def __repr__(self) -> str:
        return f"PendingMap({self.materialize()!r})"


def reason_of(pending: Mapping[str, Pending], name: str) -> PendingReason | None:
    """Why ``name`` waits in a cycle's ``pending`` result (None: not pending), without its
    queue position where the result computes those on demand (:meth:`PendingMap.reason`)."""
    if isinstance(pending, PendingMap):
        return pending.reason(name)
    found = pending.get(name)
    return None if found is None else found.reason


def _merge_key(item: tuple[tuple[object, ...], Workload, str]) -> tuple[object, ...]:
    return item[0]
