"""The merge order: which pending workload the admission cycle considers next.

Each team has two queues (lanes): work that fits its own quota now, and the rest; each is
ordered by priority, then FIFO. A team whose queue keeps its own order has one lane:
StrictFIFO (priority, then FIFO) or admission fair sharing (its local queues' usage first).
The lanes' heads are merged by the *merge key* (needs to borrow, weighted dominant share,
−priority, submit time, name) in a heap whose entries are refreshed lazily: a popped key is
checked against the current state and pushed again if it got worse, and work that no longer
fits its quota moves to its team's borrowing lane.

:class:`MergeOrder` is what the cycle pulls from: :meth:`~MergeOrder.next` gives the next
workload, and the cycle then says what considering it did (:meth:`~MergeOrder.failed` or
:meth:`~MergeOrder.admitted`).

The key-order fast path. When every lane's workloads share one merge-key prefix (borrowing,
share), no lane within quota holds borrowing work and every heap entry that may still be used
is up to date, the heap meets the workloads exactly in merge-key order until an admission
changes that. Then a shape that failed since the last state change fails again for the same
reason (:class:`ShapeFailures`), so only one workload per shape is handed out; the others are
settled in bulk (:class:`~fleetshare.governance.queues.Group`), between the workloads that come
before and after them in merge-key order. An admission that breaks the order hands back to
the heap in the state it would have reached. ``shortcuts=False`` never takes this path.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from fleetshare.governance.flavors import SHORT, Flavors, Option
from fleetshare.governance.queues import Group, Lane, QueueKey, ScoredLane, Shape, Stretch
from fleetshare.governance.quota import FR, QuotaModel
from fleetshare.governance.starvation import StarvationGuard
from fleetshare.governance.state import CycleState
from fleetshare.model.reason import PendingReason
from fleetshare.model.workload import Workload
from fleetshare.policy.schema import PreemptTeamTasks

FIFO, SCORED = "fifo", "fair"
"""Lane names of teams whose queue keeps its own order (StrictFIFO; admission fair sharing,
a :class:`~fleetshare.governance.queues.ScoredLane`): one lane each, never in the key-order
fast path."""

Key = tuple[object, ...]
"""A merge key, or its prefix (needs to borrow, weighted dominant shares: a tuple, from the
top group that orders the team's work down to the team, ``StateCache.fair_key``)."""

HELD = 0.5
"""The first element of the key under which a team's borrowing head and its head within
quota that it may preempt are considered: between work within quota (0) and borrowing work
(1); see :meth:`MergeOrder._behind`."""

HeadEntry = tuple[Key, str, str, int]
"""A heap entry for a lane's head: (merge key, lane, workload name, copies); ``copies``
stands for that many identical entries pushed in a row."""


NO_REASON = PendingReason("", "unknown", ())
"""A cursor's reason before it is settling anything."""


@dataclass(slots=True)
class Failure:
    """A shape's failed attempt: at which state version, why, and with what options."""

    version: int
    reason: PendingReason
    workload: Workload
    options: list[Option]


class ShapeFailures:
    """Within a cycle a failed attempt changes nothing (unless a starving workload
    reserves), so once a workload of some shape failed, later ones of that shape fail the
    same way, for the same reason, until the next state change: an admission or a
    reservation, each of which bumps :attr:`version`."""

    def __init__(self) -> None:
        self.version = 0
        self.by_shape: dict[int, Failure] = {}
        """Per shape uid, its latest failure."""

    def reason(self, shape: int) -> PendingReason | None:
        """Why the shape failed, if it did since the last state change."""
        failure = self.by_shape.get(shape)
        if failure is not None and failure.version == self.version:
            return failure.reason
        return None

    def renew(self, shape: int) -> bool:
        """After a state change that left the shape's quota numbers as they were: a failure
        short of quota on every option (placement played no part) holds on. True if so."""
        failure = self.by_shape.get(shape)
        if failure is None or any(option.mode != SHORT for option in failure.options):
            return False
        failure.version = self.version
        return True


class MergeKeys:
    """Merge keys of pending workloads, their prefixes cached per shape until its team's
    usage changes."""

    def __init__(
        self,
        model: QuotaModel,
        state: CycleState,
        flavors: Flavors,
        of: dict[int, tuple[Shape, QueueKey, Workload]],
        fair_share: bool,
        prefixes: dict[int, tuple[object, Key, str]],
    ) -> None:
        self._model = model
        self._state = state
        self._flavors = flavors
        self._of = of
        self._fair_share = fair_share
        self.prefixes = prefixes
        """Per shape uid: (its team's usage versions, merge-key prefix, team)."""

    def key(self, wl: Workload) -> Key:
        """The merge key: borrowing, share, priority, submit time, name."""
        return self.prefix(wl) + self._of[id(wl)][1]

    def prefix(self, wl: Workload) -> Key:
        """(needs to borrow, weighted dominant shares): the same for a shape."""
        shape = self._of[id(wl)][0].uid
        version = self._state.key_version(wl.team)
        cached = self.prefixes.get(shape)
        if cached is not None and cached[0] == version:
            return cached[1]
        prefix = self._compute_prefix(wl)
        self.prefixes[shape] = (version, prefix, wl.team)
        return prefix

    def _compute_prefix(self, wl: Workload) -> Key:
        if wl.team not in self._model.teams:
            return (0, ())
        usage = self._flavors.nominal_usage(wl)
        borrows = 0
        shares: tuple[float, ...] = ()
        if usage is not None and not self._within_for_good(wl, usage):
            borrows = 1
            if self._fair_share:
                shares = self._state.fair_key(wl.team, usage)
        return (borrows, shares)

    def _within_for_good(self, wl: Workload, usage: Mapping[FR, int]) -> bool:
        """Does ``wl`` (asking for ``usage`` on its nominal flavor) rank as work within quota?
        When it fits its team's quota now; and, when its team cannot borrow what it would
        borrow there (sharing ``Lend`` or ``DontLend``, or a borrowing limit of 0 on a
        resource it would borrow), whenever its request fits the quota at all on a flavor
        admitting it: it is admitted within the quota or not at all (making room among the
        team's own work if it must), never borrowing, as Kueue's flavor assigner ranks a
        ClusterQueue's head whose request fits its nominal quota (a flavor where it cannot
        borrow is no fit to the assigner)."""
        state = self._state
        if state.within_nominal(wl.team, usage):
            return True
        if not self._cannot_borrow(wl.team, usage):
            return False
        tree, governed = state.tree, self._model.governed

        def fits(asked: Mapping[FR, int]) -> bool:
            return all(v <= tree.quota(wl.team, fr) for fr, v in asked.items() if fr in governed)

        return fits(usage) or any(
            fits(self._flavors.usage(wl, f)) for f in self._flavors.uniform(wl)
        )

    def _cannot_borrow(self, team: str, usage: Mapping[FR, int]) -> bool:
        """Can ``team`` not borrow what ``usage`` would take beyond its quota now: it never
        borrows a resource it would borrow (:meth:`QuotaNode.never_borrows`)?"""
        node = self._model.nodes[team]
        if not node.can_borrow:
            return True
        tree, governed = self._state.tree, self._model.governed
        return any(
            fr in governed
            and tree.usage(team, fr) + value > tree.quota(team, fr)
            and node.never_borrows(fr)
            for fr, value in usage.items()
        )

    def may_preempt(self, wl: Workload, other: Workload) -> bool:
        """May ``wl`` preempt ``other``, of the same team, by the team's rule for its own work
        (priority alone; Kueue's ``withinClusterQueue``)?"""
        rules = self._model.teams.get(wl.team)
        if rules is None or rules.preempt_team_tasks == PreemptTeamTasks.NEVER:
            return False
        if wl.priority != other.priority:
            return wl.priority > other.priority
        return (
            rules.preempt_team_tasks == PreemptTeamTasks.LOWER_OR_NEWER_EQUAL_PRIORITY
            and other.submit_time > wl.submit_time
        )

    def lane(self, wl: Workload) -> str:
        """Each team has two lanes: work that fits its own quota now, and the rest.

        Heads are merged across both, so work within quota is never stuck behind a team's
        borrowing work while other teams borrow the quota away.
        """
        rules = self._model.teams.get(wl.team)
        if rules is None:
            return f"{wl.team}/unknown"
        if rules.single_lane:  # its own order: StrictFIFO, admission fair sharing
            return f"{wl.team}/{SCORED if rules.fair_admission else FIFO}"
        within = self._flavors.any_option(wl) and not self.prefix(wl)[0]
        return f"{wl.team}/{'quota' if within else 'borrow'}"


@dataclass(slots=True)
class OrderedPart:
    """Part of a cycle gone through in merge-key order: workloads attempted one by one (with
    their merge keys) and groups settled in bulk; in merge-key order together."""

    explicit: list[tuple[Key, str]] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class Cursor:
    """The key-order path's position in one lane's stretch, and whether the workloads from
    ``start`` on are being settled in bulk (``valid``, with their shape's ``reason``)."""

    lane: str
    prefix: Key
    """The lane's merge-key prefix for this run."""
    stretch: Stretch
    keys: list[QueueKey]
    wls: list[Workload]
    names: list[str]
    shape: int
    """The shape's uid."""
    team: str
    at: int
    end: int
    valid: bool = False
    start: int = 0
    reason: PendingReason = NO_REASON
    """Set with ``valid``."""

    @classmethod
    def over(cls, lane: str, prefix: Key, stretch: Stretch) -> Cursor:
        shape = stretch.shape
        return cls(
            lane,
            prefix,
            stretch,
            shape.keys,
            shape.wls,
            shape.names,
            shape.uid,
            shape.team,
            stretch.at,
            stretch.end,
            start=stretch.at,
        )

    def key(self) -> Key:
        return self.prefix + self.keys[self.at]


@dataclass(slots=True, eq=False)
class KeyOrderRun:
    """One stretch of the cycle gone through in merge-key order."""

    prefixes: dict[str, Key]
    """Each lane's merge-key prefix (the same for all its workloads)."""
    saved: list[HeadEntry]
    """The heap entries still to be used, for going back to the heap."""
    part: OrderedPart
    cursors: list[Cursor] = field(default_factory=list)
    by_shape: dict[int, list[Cursor]] = field(default_factory=dict)
    waiting: list[tuple[Key, int, Cursor, int]] = field(default_factory=list)
    """Cursors due for an attempt: (merge key, serial, cursor, its position then)."""
    serial: int = 0
    cursor: Cursor | None = None
    """The cursor of the workload handed out last."""
    key: Key = ()
    """That workload's merge key."""


class MergeOrder:
    """The order in which one cycle considers its pending workloads (module docstring)."""

    def __init__(
        self,
        keys: MergeKeys,
        state: CycleState,
        of: dict[int, tuple[Shape, QueueKey, Workload]],
        shapes: Iterable[Shape],
        failures: ShapeFailures,
        guard: StarvationGuard,
        idle_limited: set[str],
        shortcuts: bool,
        score: Callable[[Workload], float] | None = None,
    ) -> None:
        """``score``: a workload's local queue score, for teams with admission fair sharing."""
        self._keys = keys
        self._key = keys.key
        self._state = state
        self._of = of
        self._failures = failures
        self._guard = guard
        self._idle_limited = idle_limited
        """Teams with a percent-of-idle borrowing limit."""
        self._shortcuts = shortcuts
        lanes: dict[str, Lane | ScoredLane] = {}
        self._single = 0
        """How many lanes keep their own order."""
        for shape in shapes:
            name = keys.lane(shape.wls[0])
            lane = lanes.get(name)
            if lane is None:
                if name.endswith(f"/{SCORED}") and score is not None:
                    lane = lanes[name] = ScoredLane(score)
                else:
                    lane = lanes[name] = Lane()
                if name.endswith((f"/{SCORED}", f"/{FIFO}")):
                    self._single += 1
            lane.add(shape, 0, len(shape.keys))
        for lane in lanes.values():
            lane.heapify()
        self.lanes = lanes
        self._heap: list[HeadEntry] = []
        self._done: set[str] = set()
        """Names of the workloads handed out."""
        self._started = False
        self._held: set[str] = set()
        """Lanes within quota whose head waits behind the team's borrowing head
        (:meth:`_behind`)."""
        self._taken: str | None = None
        """The lane the heap loop took the last workload from (its next head is pushed once
        the cycle has considered that workload)."""
        self._pops = 0
        self._check_at = 0
        """When the heap loop next checks whether it goes on in merge-key order."""
        self._run: KeyOrderRun | None = None
        self._names: list[str] = []
        self.segments: list[list[str] | OrderedPart] = [self._names]
        """The order in which the workloads left pending were met: in turn, names in the
        order considered, and parts gone through in merge-key order."""
        self.groups: list[Group] = []
        """Every group settled in bulk."""

    # -- what the cycle calls ----------------------------------------------------------------

    def next(self) -> Workload | None:
        """The next workload to consider; None when every workload was considered or
        settled in bulk."""
        if not self._started:
            self._started = True
            for lane in list(self.lanes):
                self._push_head(lane)
        if self._run is not None:
            return self._next_in_key_order(self._run)
        lanes = self.lanes
        heap = self._heap
        while heap:
            if self._pops >= self._check_at and self._shortcuts:
                prefixes = self._in_key_order()
                if prefixes is not None:
                    self._run = self._start_key_order(prefixes)
                    return self._next_in_key_order(self._run)
                self._check_at = self._pops + 32
            key, lane, name, copies = heapq.heappop(heap)
            if copies > 1:  # the others stay
                heapq.heappush(heap, (key, lane, name, copies - 1))
            self._pops += 1
            queue = lanes[lane]
            if not queue or queue.head().name != name:
                continue  # a stale entry: that workload was taken or moved
            wl = queue.head()
            own = self._key(wl)
            if own[0] and lane.endswith("/quota"):
                self._push_head(lane)
                continue
            fresh = self._behind(lane, wl, own)
            if fresh != key and heap and (fresh, lane) > heap[0][:2]:
                heapq.heappush(heap, (fresh, lane, name, 1))
                continue
            queue.pop()
            self._done.add(name)
            self._taken = lane
            return wl
        return None

    def held_within_quota(self, wl: Workload) -> list[Workload]:
        """When ``wl`` (from :meth:`next`) is a team's borrowing head held at :data:`HELD`:
        the other teams' heads within quota held there too. Their quota is not lent to it:
        they are considered after it (behind their own team's borrowing head), and would
        take the quota back at once."""
        lane = self._taken
        if lane is None or not lane.endswith("/borrow") or not self._held:
            return []
        out = []
        for quota in sorted(self._held):
            queue = self.lanes.get(quota)
            if not queue or quota.startswith(f"{wl.team}/"):
                continue
            head = queue.head()
            if self._behind(quota, head, self._key(head))[0] == HELD:
                out.append(head)
        return out

    def failed(self, wl: Workload, reserved: bool) -> None:
        """``wl`` (from :meth:`next`) stays pending; ``reserved``: it made a reservation."""
        run = self._run
        if run is None:
            self._names.append(wl.name)
            self._after_heap_pop()
            return
        cursor = run.cursor
        assert cursor is not None
        run.part.explicit.append((run.key, wl.name))
        if reserved:
            self._after_change(run, cursor, [other for other in run.cursors if other.valid])
            return
        reason = self._failures.reason(cursor.shape)
        if reason is not None:  # its shape failed: bulk from now
            starving = self._guard.starving
            for other in run.by_shape[cursor.shape]:
                if (
                    other is not cursor
                    and not other.valid
                    and other.at < other.end
                    and not starving(other.wls[other.at])
                ):
                    other.valid, other.start, other.reason = True, other.at, reason
        if cursor.at < cursor.end:
            self._schedule(run, cursor)

    def failed_after_change(self, wl: Workload, teams: set[str]) -> None:
        """``wl`` (from :meth:`next`) stays pending, yet the usage of ``teams`` changed while
        it was considered (work it preempted for made room that a teammate took)."""
        run = self._run
        if run is None:
            self._names.append(wl.name)
        else:
            run.part.explicit.append((run.key, wl.name))
        self.admitted(wl, teams, quiet=False)

    def taken(self, name: str) -> None:
        """``name``, met as failed, was admitted later in the cycle: it is not pending."""
        for segment in self.segments:
            if isinstance(segment, list):
                if name in segment:
                    segment.remove(name)
                    return
            else:
                for i, (_, met) in enumerate(segment.explicit):
                    if met == name:
                        del segment.explicit[i]
                        return

    def admitted(self, wl: Workload, teams: set[str], quiet: bool) -> None:
        """``wl`` (from :meth:`next`) was admitted, changing the usage of ``teams`` (its own,
        and its victims'); ``quiet``: nothing was evicted and no failed preemption search was
        forgotten."""
        run = self._run
        if run is None:
            queue = self.lanes[self._taken] if self._taken is not None else None
            if isinstance(queue, ScoredLane):
                queue.reorder()  # its local queue's score grew
            self._after_heap_pop()
            return
        cursor = run.cursor
        assert cursor is not None
        # what was settled in bulk is settled up to here, except for shapes the admission
        # cannot have affected (``_unaffected``)
        closed = [other for other in run.cursors if other.valid]
        if not self._still_in_key_order(run, teams):
            for other in closed:
                self._close(run, other, run.key)
            self._resume_heap(run, cursor.lane)
            return
        if quiet:
            closed = self._unaffected(closed)
        self._after_change(run, cursor, closed)

    # -- the heap of lane heads ----------------------------------------------------------------

    def _after_heap_pop(self) -> None:
        lane, self._taken = self._taken, None
        assert lane is not None
        self._push_head(lane)
        if lane.endswith("/borrow"):
            quota = lane.removesuffix("borrow") + "quota"
            if quota in self._held:  # it waited behind the head just taken
                self._held.discard(quota)
                self._push_head(quota)

    def _behind(self, lane: str, wl: Workload, key: Key) -> Key:
        """The key under which a lane's head ``wl`` (merge key ``key``) is considered.

        A team's work within quota never starts only to be preempted at the same instant by
        the team's own borrowing work that may preempt it (:meth:`MergeKeys.may_preempt`).
        Kueue's ClusterQueue is one queue, priority first: so the team's borrowing head
        goes first, and its head within quota right after it (the lane names break the
        tie: ``borrow`` < ``quota``). Both are *held* at the tier :data:`HELD`, after all
        work within quota (which they must not lend away) and before all other borrowing
        work (which would borrow the quota the held work needs, to be reclaimed at once).
        """
        team = wl.team
        if lane.endswith("/quota"):
            other = self.lanes.get(f"{team}/borrow")
            if not other or not self._keys.may_preempt(other.head(), wl):
                return key
            self._held.add(lane)
            return (HELD, *self._key(other.head())[1:])
        if lane.endswith("/borrow"):
            other = self.lanes.get(f"{team}/quota")
            if other and self._keys.may_preempt(wl, other.head()):
                return (HELD, *key[1:])
        return key

    def _push_head(self, lane: str, copies: int = 1) -> None:
        queue = self.lanes.get(lane)
        while queue:
            wl = queue.head()
            key = self._key(wl)
            if key[0] and lane.endswith("/quota"):
                # no longer within quota now that its team took more: to the borrowing
                # lane, so the team's work still within quota is not stuck behind it. One at
                # a time, each move pushes the borrowing lane's head: a run of moves pushes
                # as many (identical) entries.
                shape, at, stop = queue.pop_run()
                borrow = f"{wl.team}/borrow"
                self.lanes.setdefault(borrow, Lane()).push(shape, at, stop)
                self._push_head(borrow, stop - at)
                continue
            held = self._behind(lane, wl, key)
            heapq.heappush(self._heap, (held, lane, wl.name, copies))
            if held[0] == HELD and lane.endswith("/quota"):
                self._push_head(f"{wl.team}/borrow")  # held with it
            return

    # -- the same order, in merge-key order ----------------------------------------------------

    def _in_key_order(self) -> dict[str, Key] | None:
        """Each lane's merge-key prefix, if the heap now goes in merge-key order."""
        prefixes: dict[str, Key] = {}
        prefix_of = self._keys.prefix
        single = self._single
        for lane, queue in self.lanes.items():
            if not queue:
                continue
            if single and lane.endswith((f"/{SCORED}", f"/{FIFO}")):
                return None  # a queue in its own order: one workload at a time
            prefix: Key | None = None
            for shape, at in queue.remaining():
                found = prefix_of(shape.wls[at])
                if prefix is None:
                    prefix = found
                elif found != prefix:
                    return None
            assert prefix is not None
            if prefix[0] and lane.endswith("/quota"):
                return None
            if lane.endswith("/quota") and self._may_wait(lane, queue):
                return None
            prefixes[lane] = prefix
        # Entries that may still be used must be up to date. (An entry for a workload that
        # left a lane within quota has that lane's prefix: nothing to tell apart there.)
        for key, lane, name, _ in self._heap:
            if name not in self._done and self.lanes[lane] and key[:2] != prefixes[lane]:
                return None
        return prefixes

    def _may_wait(self, lane: str, queue: Lane | ScoredLane) -> bool:
        """Could any of this lane's work within quota wait behind its team's borrowing head
        (:meth:`_behind`)? The last of it in queue order is the first to."""
        borrow = self.lanes.get(lane.removesuffix("quota") + "borrow")
        if not borrow:
            return False
        last = max(queue.stretches(), key=lambda s: s.shape.keys[s.end - 1])
        return self._keys.may_preempt(borrow.head(), last.shape.wls[last.end - 1])

    def _start_key_order(self, prefixes: dict[str, Key]) -> KeyOrderRun:
        saved = [entry for entry in self._heap if entry[2] not in self._done]
        self._heap.clear()
        run = KeyOrderRun(prefixes, saved, OrderedPart())
        self.segments.append(run.part)
        for lane, queue in self.lanes.items():
            for stretch in queue.stretches():
                cursor = Cursor.over(lane, prefixes[lane], stretch)
                run.cursors.append(cursor)
                run.by_shape.setdefault(cursor.shape, []).append(cursor)
        for cursor in run.cursors:
            self._schedule(run, cursor)
        return run

    def _next_in_key_order(self, run: KeyOrderRun) -> Workload | None:
        waiting = run.waiting
        while waiting:
            key, _, cursor, at = heapq.heappop(waiting)
            if cursor.valid or cursor.at != at:
                continue
            wl = cursor.wls[at]
            cursor.at = at + 1
            run.cursor, run.key = cursor, key
            tree = self._state.tree
            tree.touched.clear()
            tree.lendable_changed = False
            self._done.add(wl.name)
            return wl
        # the end of the cycle: what is still settled in bulk is settled to its end
        for cursor in run.cursors:
            if cursor.valid:
                cursor.at = self._close(run, cursor, None)
        for queue in self.lanes.values():
            queue.clear()
        self._run = None
        return None

    def _schedule(self, run: KeyOrderRun, cursor: Cursor) -> None:
        """Settled in bulk while its shape's failure holds, else due for an attempt."""
        at = cursor.at
        reason = self._failures.reason(cursor.shape)
        if reason is not None and not self._guard.may_reserve(cursor.wls[at], cursor.shape):
            cursor.valid, cursor.start, cursor.reason = True, at, reason
            return
        cursor.valid = False
        run.serial += 1
        heapq.heappush(run.waiting, (cursor.key(), run.serial, cursor, at))

    def _after_change(self, run: KeyOrderRun, cursor: Cursor, closed: list[Cursor]) -> None:
        """After a state change: settle ``closed`` up to here and schedule them again, with
        the cursor just handed out (the others still wait at their next workload)."""
        for other in closed:
            self._close(run, other, run.key)
        closed.append(cursor)
        for other in closed:
            if other.at < other.end:
                self._schedule(run, other)

    def _close(self, run: KeyOrderRun, cursor: Cursor, before: Key | None) -> int:
        """Settle a cursor's bulk run up to merge key ``before`` (None: to its end)."""
        cursor.valid = False
        end = cursor.end
        if before is not None:
            prefix = before[:2]
            if cursor.prefix > prefix:
                end = cursor.start
            elif cursor.prefix == prefix:
                qk = before[2:]
                end = bisect_left(cursor.keys, qk, cursor.start, cursor.end)
        if end > cursor.start:
            group = Group(
                cursor.shape,
                cursor.prefix,
                cursor.keys,
                cursor.wls,
                cursor.names,
                cursor.start,
                end,
                cursor.reason,
            )
            run.part.groups.append(group)
            self.groups.append(group)
        cursor.at = end
        return end

    def _unaffected(self, valid: list[Cursor]) -> list[Cursor]:
        """After an admission (no eviction, nothing forgotten about failed searches): keep
        settling in bulk the shapes whose attempt would go exactly as before, and return the
        others. Those are shapes short of quota on every option (so placement played no part)
        of teams whose quota numbers did not change: not under the quota-tree nodes whose
        usage changed, nor with a percent-of-idle limit when the idle pool changed. Their
        reason is the same, and their searches stay known to fail (so trying notes nothing)."""
        tree = self._state.tree
        affected: set[str] = set()
        for name in tree.touched:
            affected |= tree.teams_under(name)
        if tree.lendable_changed:
            affected |= self._idle_limited
        renew = self._failures.renew
        return [c for c in valid if c.team in affected or not renew(c.shape)]

    def _still_in_key_order(self, run: KeyOrderRun, teams: set[str]) -> bool:
        """After an admission: did the teams whose usage changed keep their merge-key
        prefixes (others' prefixes do not depend on it)?"""
        prefix_of = self._keys.prefix
        for cursor in run.cursors:
            if (
                cursor.at < cursor.end
                and cursor.wls[cursor.at].team in teams
                and prefix_of(cursor.wls[cursor.at]) != run.prefixes[cursor.lane]
            ):
                return False
        return True

    def _resume_heap(self, run: KeyOrderRun, lane: str) -> None:
        """Back to the heap loop in the state it would be in now: each lane's head has the
        entry pushed when it became the head (with the merge key it had then), except the
        lane just taken from, whose new head is pushed now."""
        for cursor in run.cursors:
            cursor.stretch.at = cursor.at
        for queue in self.lanes.values():
            queue.rebuild(queue.stretches())
        self._run = None
        self._check_at = self._pops + 8
        self._names = []
        self.segments.append(self._names)
        heap = self._heap
        heap.extend(run.saved)
        for name, queue in self.lanes.items():
            if queue and name != lane:
                head = queue.head()
                heap.append((run.prefixes[name] + self._of[id(head)][1], name, head.name, 1))
        heapq.heapify(heap)
        self._push_head(lane)
