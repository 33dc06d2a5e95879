"""The admission cycle: which pending workloads to admit, where, and whom to preempt.

Order. Each team's queue is ordered by priority, then submit time (FIFO). Across teams, the
heads are merged by: work that fits within its team's own quota first, then (with fair
sharing) the lowest dominant resource share, then priority, then submit time. Every pending
workload is considered in one cycle — not one head per queue as in Kueue — and one that does
not fit is skipped, so a large job never blocks smaller ones behind it (no head-of-line
blocking).

Starvation. A workload pending longer than ``starvation_guard_seconds`` that could fit in an
empty cluster *reserves* what it asks for: later work of the same or lower priority that would
compete for the same (flavor, resource) — its own team's work, or anyone's borrowing — is held
back until it fits. Work within another team's own quota is never held back.

Speed. The decisions above are what every cycle computes; how it gets there is cheaper than
trying every workload in full (``Engine.shortcuts = False`` does that, for tests):

- Pending work is grouped by *shape* (team, priority, pod sets): within a cycle a failed
  attempt changes nothing, so once a workload of a shape failed, the others of that shape fail
  the same way, for the same reason, until the next admission (or reservation).
- When the heap loop is known to go on in merge-key order (every queue's key prefix uniform,
  no moves between a team's queues pending, no stale heap entry that matters), the cycle goes
  on in that order but only tries one workload per shape between two admissions, and settles
  the others in bulk (``_run_in_key_order``); a state change that breaks the order hands back
  to the heap loop in the state it would have reached.
- A preemption search among the team's own work that failed fails again while nothing was
  evicted and the same pairs are short (work only got added since); such results, and the
  failures of the final state, carry over to the next cycle at the same moment when it starts
  where this one ended (``_Carry``).
- With a ``CycleCache`` (a runner's), the state of nodes and running work and the grouping of
  pending work are updated from the previous snapshot instead of rebuilt, and the pending result
  is built on demand (``PendingMap``), with the list of reasons that changed.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any

from fleetshare.governance.preemption import (
    Victim,
    contested_pairs,
    find_victims,
    may_have_own,
)
from fleetshare.governance.preemption_cache import Attempt, FailedPreemptions
from fleetshare.governance.queues import (
    Group,
    Lane,
    PendingIndex,
    PendingMap,
    QueueKey,
    Shape,
)
from fleetshare.governance.queues import queue_key as queue_key
from fleetshare.governance.quota import FR, QuotaModel, compile_policy
from fleetshare.governance.snapshot import (
    Admission,
    Assignment,
    CycleResult,
    Preemption,
    Running,
    Snapshot,
)
from fleetshare.governance.starvation import Reservation, Reservations, held_message
from fleetshare.governance.state import Admitted, StateCache, usage_of
from fleetshare.model.catalog import Catalog
from fleetshare.model.workload import Workload
from fleetshare.placement.fit import NoFit, PlacementPlan
from fleetshare.policy.schema import Policy, PreemptTeamTasks

_NOMINAL, _BORROW, _SHORT = 0, 1, 2


@dataclass(slots=True)
class _Option:
    """One way to run a workload: a flavor per pod set, and its quota standing."""

    flavors: tuple[str, ...]
    usage: dict[FR, int]
    mode: int
    problem: str | None
    within: bool
    """Within the team's own quota (whether or not that quota is lent out now)."""


class Engine:
    """Governance for one policy: call :meth:`cycle` with a snapshot, get decisions back."""

    def __init__(self, policy: Policy, catalog: Catalog | None = None) -> None:
        self.policy = policy
        self.model: QuotaModel = compile_policy(policy, catalog)
        self.cache: CycleCache | None = None
        """Used by :meth:`cycle` when it is given none (a runner sets one for its run)."""
        self.shortcuts = True
        """False: try every pending workload in full, in the heap loop, with no carried
        search results: the plain algorithm the shortcuts must agree with (for tests)."""

    def cycle(self, snapshot: Snapshot, cache: CycleCache | None = None) -> CycleResult:
        """Run one admission cycle; the snapshot is not modified.

        ``cache`` (default :attr:`cache`) carries work over between the cycles of one run
        (consecutive snapshots of a replay); the decisions are the same with or without it.
        Without one, ``result.pending`` is a plain dictionary; with one it is a
        :class:`~fleetshare.governance.queues.PendingMap` built on demand, and
        ``result.pending_changed`` lists the workloads whose reason differs from the previous
        cycle run with that cache.
        """
        cache = cache if cache is not None else self.cache
        if cache is None:
            result = _Cycle(self.model, self.policy, snapshot, CycleCache(), self.shortcuts).run()
            if isinstance(result.pending, PendingMap):
                result.pending = result.pending.materialize()
            result.pending_changed = None
            return result
        return _Cycle(self.model, self.policy, snapshot, cache, self.shortcuts).run()


class CycleCache:
    """What one run's cycles may reuse from each other (see :meth:`Engine.cycle`): the state
    the last snapshot's nodes and running work give, and its pending work grouped by shape.

    Use one per sequence of snapshots (one runner, cycles applied in order); it follows policy
    and node changes by itself.
    """

    def __init__(self) -> None:
        self.state = StateCache()
        self.pending = PendingIndex()
        self.carry: _Carry | None = None
        """What the last cycle leaves to the next one at the same moment."""


@dataclass(slots=True)
class _Carry:
    """Failed own-work preemption searches (see ``_Cycle._try_preemption``) that still fail
    in the next cycle, if it starts where this one ended: same moment, nodes and policy, the
    admissions applied, and no eviction. Not those whose team admitted work they may preempt:
    admitted in this cycle, it was no candidate; in the next, it is."""

    now: float
    model: QuotaModel
    admitted: dict[str, Assignment]
    failed_own: dict[tuple[str, int, int, tuple[str, ...]], tuple[int, frozenset[FR]]]
    failed: dict[int, tuple[str, list[_Option]]]
    """Shapes that failed in the final state, every option needing to borrow (so their
    searches are among their own team's work only): the reason and the options then."""
    prefixes: dict[int, tuple[str, tuple[object, ...]]]
    """Merge-key prefixes of shapes in the final state (with their team)."""


_Entry = tuple[tuple[object, ...], str, str, int]


class _Cycle:
    def __init__(
        self,
        model: QuotaModel,
        policy: Policy,
        snapshot: Snapshot,
        cache: CycleCache,
        shortcuts: bool = True,
    ) -> None:
        self.model = model
        self._shortcuts = shortcuts
        self.policy = policy
        self.snapshot = snapshot
        self.state = cache.state.state(model, policy.cluster, snapshot)
        self.result = CycleResult(warnings=list(self.state.warnings))
        self.reservations = Reservations()
        self.failed_preemption = FailedPreemptions()
        self._flavor_cache: dict[int, tuple[str, ...]] = self.state.memo.setdefault("flavors", {})
        self._evictions = 0
        self._failed_own: dict[
            tuple[str, int, int, tuple[str, ...]], tuple[int, frozenset[FR]]
        ] = {}
        self._prefixes: dict[int, tuple[int, tuple[object, ...], str]] = {}
        """Per shape: (its team's version, merge-key prefix, team)."""
        carry, cache.carry = cache.carry, None
        self._carried: dict[int, tuple[str, list[_Option]]] = {}
        if shortcuts and carry is not None and self._continues(carry, cache.state.changes):
            self._failed_own = carry.failed_own
            self._carried = carry.failed
            self._prefixes = {uid: (0, p, team) for uid, (team, p) in carry.prefixes.items()}
        self._failures: dict[int, tuple[int, str, Workload, list[_Option]]] = {}
        self._idle_limited = {name for name, node in model.nodes.items() if node.idle_percent}
        self._options: list[_Option] = []
        self._cache = cache
        self._known: dict[str, tuple[Workload, str]] = {}
        self._held: str | None = None
        self._fits_empty: dict[tuple[object, ...], bool] = {}
        index = self.index = cache.pending
        index.update(model, snapshot.pending)
        self._of = index.of
        # Within a cycle a failed attempt changes nothing (unless a starving workload
        # reserves), so once a workload of some shape failed, later ones of that shape fail
        # the same way, for the same reason, until the next admission or reservation
        # (``_version``). Starving workloads are always tried in full: they may own or make
        # a reservation.
        self._version = 0
        self._shape_reserved: dict[int, Reservation] = {}
        """Per shape, the reservation of its longest-waiting starving member: the members
        behind it wait behind it (same team, needs and priority), so they reserve nothing."""
        self._memo: dict[int, tuple[int, str]] = {}
        self._explicit: dict[str, tuple[Workload, str]] = {}
        self._segments: list[list[str] | _Run] = [[]]
        self._groups: list[Group] = []
        self._team_keys: dict[str, list[list[QueueKey]]] = {}
        queues: dict[str, Lane] = {}
        for shape in index.shapes.values():
            lane = queues.setdefault(self._lane(shape.wls[0]), Lane())
            lane.add(shape, 0, len(shape.keys))
            self._team_keys.setdefault(shape.team, []).append(shape.keys)
        for queue in queues.values():
            queue.heapify()
        self.queues = queues
        self._heap: list[_Entry] = []
        """(merge key, lane, workload name, copies): a lane head's entries, refreshed lazily;
        ``copies`` stands for that many identical entries pushed in a row."""
        self._done: set[str] = set()

    def _lane(self, wl: Workload) -> str:
        """Each team has two queues: work that fits its own quota now, and the rest.

        Heads are merged across both, so work within quota is never stuck behind a team's
        borrowing work while other teams borrow the quota away.
        """
        if wl.team not in self.model.teams:
            return f"{wl.team}/unknown"
        within = bool(self._flavors(wl)) and not self._prefix(wl)[0]  # fits its quota now
        return f"{wl.team}/{'quota' if within else 'borrow'}"

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> CycleResult:
        if self.policy.cluster.starvation_guard_seconds is not None:
            self._reserve_starving()
        queues = self.queues
        heap = self._heap
        for lane in list(queues):
            self._push_head(lane)
        check_at = 0
        pops = 0
        while heap:
            if pops >= check_at and self._shortcuts:
                prefixes = self._in_key_order()
                if prefixes is not None:
                    if self._run_in_key_order(prefixes):
                        break
                    check_at = pops + 8
                else:
                    check_at = pops + 32
            key, lane, name, copies = heapq.heappop(heap)
            if copies > 1:  # the others stay
                heapq.heappush(heap, (key, lane, name, copies - 1))
            pops += 1
            queue = queues[lane]
            if not queue or queue.head().name != name:
                continue  # a stale entry: that workload was taken or moved
            wl = queue.head()
            fresh = self._key(wl)
            if fresh != key and fresh[0] and lane.endswith("/quota"):
                self._push_head(lane)
                continue
            if fresh != key and heap and fresh > heap[0][0]:
                heapq.heappush(heap, (fresh, lane, name, 1))
                continue
            queue.pop()
            self._consider(wl)
            self._push_head(lane)
        self._finish()
        self.result.wake_at = self._wake_at()
        self._leave_carry()
        return self.result

    def _push_head(self, lane: str, copies: int = 1) -> None:
        queue = self.queues.get(lane)
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
                self.queues.setdefault(borrow, Lane()).push(shape, at, stop)
                self._push_head(borrow, stop - at)
                continue
            heapq.heappush(self._heap, (key, lane, wl.name, copies))
            return

    # -- the same loop, in merge-key order -------------------------------------------------
    #
    # The loop above merges the queues' heads by merge key (borrowing, share, priority,
    # submit time, name), with lazily refreshed heap entries and moves between a team's two
    # queues. When every queue's workloads share one merge-key prefix (borrowing, share), no
    # queue within quota holds borrowing work, and every heap entry that may still be used is
    # up to date, the loop meets the workloads exactly in merge-key order until an admission
    # changes that. Then most of the loop can be skipped: a shape that failed since the last
    # state change fails again for the same reason, so only one workload per shape needs a
    # real attempt; the others are settled in bulk (``Group``), between the attempts that
    # come before and after them in merge-key order.

    def _in_key_order(self) -> dict[str, tuple[object, ...]] | None:
        """Each queue's merge-key prefix, if the loop now goes in merge-key order."""
        prefixes: dict[str, tuple[object, ...]] = {}
        for lane, queue in self.queues.items():
            if not queue:
                continue
            prefix: tuple[object, ...] | None = None
            for shape, at in queue.remaining():
                found = self._prefix(shape.wls[at])
                if prefix is None:
                    prefix = found
                elif found != prefix:
                    return None
            assert prefix is not None
            if prefix[0] and lane.endswith("/quota"):
                return None
            prefixes[lane] = prefix
        # Entries that may still be used must be up to date. (An entry for a workload that
        # left a queue within quota has that queue's prefix: nothing to tell apart there.)
        for key, lane, name, _ in self._heap:
            if name not in self._done and self.queues[lane] and key[:2] != prefixes[lane]:
                return None
        return prefixes

    def _run_in_key_order(self, prefixes: dict[str, tuple[object, ...]]) -> bool:
        """Go on in merge-key order; True when the cycle is over, False when an admission
        broke the order (the heap loop then resumes exactly where this stopped)."""
        saved = [entry for entry in self._heap if entry[2] not in self._done]
        self._heap.clear()
        run = _Run()
        self._segments.append(run)
        cursors: list[_Cursor] = []
        by_shape: dict[int, list[_Cursor]] = {}
        for lane, queue in self.queues.items():
            for item in queue.heap:
                cursor = _Cursor(lane, prefixes[lane], item)
                cursors.append(cursor)
                by_shape.setdefault(cursor.shape, []).append(cursor)
        waiting: list[tuple[tuple[object, ...], int, _Cursor, int]] = []
        serial = 0

        def schedule(cursor: _Cursor) -> None:
            """Settled in bulk while its shape's failure holds, else due for an attempt."""
            nonlocal serial
            memo = self._memo.get(cursor.shape)
            at = cursor.at
            if (
                memo is not None
                and memo[0] == self._version
                and not self._may_reserve(cursor.wls[at], cursor.shape)
            ):
                cursor.valid, cursor.start, cursor.reason = True, at, memo[1]
                return
            cursor.valid = False
            serial += 1
            heapq.heappush(waiting, (cursor.key(), serial, cursor, at))

        for cursor in cursors:
            schedule(cursor)
        while waiting:
            key, _, cursor, at = heapq.heappop(waiting)
            if cursor.valid or cursor.at != at:
                continue
            wl = cursor.wls[at]
            cursor.at = at + 1
            version = self._version
            admitted = len(self.result.admissions)
            preempted = len(self.result.preemptions)
            tree = self.state.tree
            tree.touched.clear()
            tree.lendable_changed = False
            forgets = self.failed_preemption.forgets
            self._consider(wl)
            if wl.name in self._explicit:
                run.explicit.append((key, wl.name))
            if self._version == version:
                memo = self._memo.get(cursor.shape)
                if memo is not None and memo[0] == version:  # its shape failed: bulk from now
                    for other in by_shape[cursor.shape]:
                        if (
                            other is not cursor
                            and not other.valid
                            and other.at < other.end
                            and not self._starving(other.wls[other.at])
                        ):
                            other.valid, other.start, other.reason = True, other.at, memo[1]
                if cursor.at < cursor.end:
                    schedule(cursor)
                continue
            # the state changed: what was settled in bulk is settled up to here, except for
            # shapes the admission cannot have affected (``_unaffected``)
            closed = [other for other in cursors if other.valid]
            if len(self.result.admissions) > admitted:
                teams = {wl.team} | {p.workload.team for p in self.result.preemptions[preempted:]}
                if not self._still_in_key_order(cursors, prefixes, teams):
                    for other in closed:
                        self._close(run, other, key)
                    self._resume_heap(cursors, prefixes, saved, cursor.lane)
                    return False
                if (
                    len(self.result.preemptions) == preempted
                    and self.failed_preemption.forgets == forgets
                ):
                    closed = self._unaffected(closed)
            for other in closed:
                self._close(run, other, key)
            closed.append(cursor)  # the others still wait at their next workload
            for other in closed:
                if other.at < other.end:
                    schedule(other)
        for cursor in cursors:
            if cursor.valid:
                cursor.at = self._close(run, cursor, None)
        for queue in self.queues.values():
            queue.heap.clear()
        return True

    def _close(self, run: _Run, cursor: _Cursor, before: tuple[object, ...] | None) -> int:
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
            run.groups.append(group)
            self._groups.append(group)
        cursor.at = end
        return end

    def _unaffected(self, valid: list[_Cursor]) -> list[_Cursor]:
        """After an admission (no eviction, nothing forgotten about failed searches): keep
        settling in bulk the shapes whose attempt would go exactly as before, and return the
        others. Those are shapes short of quota on every option (so placement played no part)
        of teams whose quota numbers did not change: not under the quota-tree nodes whose
        usage changed, nor with a percent-of-idle limit when the idle pool changed. Their
        reason is the same, and their searches stay known to fail (so trying notes nothing)."""
        tree = self.state.tree
        affected: set[str] = set()
        for name in tree.touched:
            affected |= tree.teams_under(name)
        if tree.lendable_changed:
            affected |= self._idle_limited
        out = []
        for cursor in valid:
            failure = self._failures.get(cursor.shape)
            if (
                cursor.team in affected
                or failure is None
                or any(option.mode != _SHORT for option in failure[3])
            ):
                out.append(cursor)
                continue
            self._memo[cursor.shape] = (self._version, cursor.reason)
            self._failures[cursor.shape] = (self._version, *failure[1:])
        return out

    def _still_in_key_order(
        self,
        cursors: list[_Cursor],
        prefixes: dict[str, tuple[object, ...]],
        teams: set[str],
    ) -> bool:
        """After an admission: did the teams whose usage changed keep their merge-key
        prefixes (others' prefixes do not depend on it)?"""
        for cursor in cursors:
            if (
                cursor.at < cursor.end
                and cursor.wls[cursor.at].team in teams
                and self._prefix(cursor.wls[cursor.at]) != prefixes[cursor.lane]
            ):
                return False
        return True

    def _resume_heap(
        self,
        cursors: list[_Cursor],
        prefixes: dict[str, tuple[object, ...]],
        saved: list[_Entry],
        lane: str,
    ) -> None:
        """Back to the heap loop in the state it would be in now: each queue's head has the
        entry pushed when it became the head (with the merge key it had then), except the
        queue just taken from, whose new head is pushed now."""
        for cursor in cursors:
            cursor.sync()
        for queue in self.queues.values():
            queue.heap = [item for item in queue.heap if item[3] < item[4]]
            queue.heapify()
        self._segments.append([])
        heap = self._heap
        heap.extend(saved)
        for name, queue in self.queues.items():
            if queue and name != lane:
                head = queue.head()
                heap.append((prefixes[name] + self._of[id(head)][1], name, head.name, 1))
        heapq.heapify(heap)
        self._push_head(lane)

    def _continues(self, carry: _Carry, changes: tuple[bool, int, list[Running]]) -> bool:
        """Does this cycle start where the carrying one ended?"""
        rebuilt, gone, added = changes
        if rebuilt or gone or carry.now != self.snapshot.now or carry.model is not self.model:
            return False
        if len(added) != len(carry.admitted):
            return False
        return all(carry.admitted.get(r.workload.name) == r.assignment for r in added)

    def _leave_carry(self) -> None:
        if self._evictions or not self._shortcuts:
            return
        admitted = {a.workload.name: a.assignment for a in self.result.admissions}
        lowest: dict[str, int] = {}  # per team, the lowest priority it admitted
        for a in self.result.admissions:
            wl = a.workload
            lowest[wl.team] = min(wl.priority, lowest.get(wl.team, wl.priority))

        def same_candidates(team: str, priority: int) -> bool:
            """Is nothing the team admitted a candidate for its own work at ``priority``?"""
            if team not in lowest:
                return True
            rule = self.model.teams[team].preempt_team_tasks
            if rule == PreemptTeamTasks.NEVER:
                return True
            if rule == PreemptTeamTasks.LOWER_OR_NEWER_EQUAL_PRIORITY:
                return lowest[team] > priority
            return lowest[team] >= priority

        kept = {key: v for key, v in self._failed_own.items() if same_candidates(*key[:2])}
        failed: dict[int, tuple[str, list[_Option]]] = {}
        if not self.reservations and not self.policy.cluster.fair_share:
            for uid, (version, reason, wl, options) in self._failures.items():
                if (
                    version == self._version
                    and (wl.team not in self.model.teams or same_candidates(wl.team, wl.priority))
                    and not any(option.within for option in options)
                ):
                    failed[uid] = (reason, options)
        versions = self.state.version
        prefixes = {
            uid: (team, prefix)
            for uid, (version, prefix, team) in self._prefixes.items()
            if version == versions.get(team, 0)
        }
        self._cache.carry = _Carry(self.snapshot.now, self.model, admitted, kept, failed, prefixes)

    # -- the result ------------------------------------------------------------------------

    def _finish(self) -> None:
        """The pending result, and which reasons changed since the previous cycle."""
        admitted: dict[str, list[QueueKey]] = {}
        for admission in self.result.admissions:
            wl = admission.workload
            admitted.setdefault(wl.team, []).append(self._of[id(wl)][1])
        for keys in admitted.values():
            keys.sort()
        changed = self._changed()
        self.result.pending = PendingMap(
            self._explicit, self._segments, self._groups, self._team_keys, admitted, self._known
        )
        self.result.pending_changed = changed

    def _changed(self) -> list[str]:
        index = self.index
        last_explicit, last_bulk = index.last_explicit, index.last_bulk
        explicit = self._explicit

        def differs(name: str, wl: Workload, reason: str) -> bool:
            before = last_explicit.get(name)
            if before is None:
                for was, members in last_bulk.get(self._of[id(wl)][0].uid, {}).items():
                    if name in members:
                        before = was
                        break
            return before != reason

        changed: list[str] = []
        known = self._known
        by_name = index.by_name
        bulk_now: dict[int, dict[str, set[str]]] = {}
        for segment in self._segments:
            if isinstance(segment, list):
                changed += [n for n in segment if differs(n, *explicit[n])]
                continue
            found = [(key, n) for key, n in segment.explicit if differs(n, *explicit[n])]
            for group in segment.groups:
                members = set(group.names[group.start : group.end])
                reason = group.reason
                same = last_bulk.get(group.shape, {}).get(reason)
                fresh = members if same is None else members - same
                for name in fresh:
                    if last_explicit.get(name) != reason:
                        _, qk, wl = by_name[name]
                        found.append((group.prefix + qk, name))
                        known[name] = (wl, reason)
                slots = bulk_now.setdefault(group.shape, {})
                now = slots.get(reason)
                if now is None:
                    slots[reason] = members
                else:
                    now |= members
            found.sort()
            changed += [n for _, n in found]
        index.last_explicit = {name: reason for name, (_, reason) in explicit.items()}
        index.last_bulk = bulk_now
        return changed

    def _wake_at(self) -> float | None:
        if not self.result.pending:
            return None
        now = self.snapshot.now
        settings = self.policy.cluster.preemption
        times: list[float] = []
        started = self.state.admitted_times  # sorted; then what the cycle admitted, now
        for grace in (settings.min_runtime_seconds, settings.reclaim_grace_seconds):
            at = bisect_right(started, now, key=lambda t: t + grace)
            if at < len(started):
                times.append(started[at] + grace)
            if self.result.admissions and now + grace > now:
                times.append(now + grace)
        guard = self.policy.cluster.starvation_guard_seconds
        if guard is not None:
            times += [
                wl.submit_time + guard
                for wl, _ in self._explicit.values()
                if wl.submit_time + guard > now
            ]
            for g in self._groups:  # one shape: in submit order, so the first one after now
                at = bisect_right(g.keys, now, g.start, g.end, key=lambda k: k[1] + guard)
                if at < g.end:
                    times.append(g.wls[at].submit_time + guard)
        return min(times, default=None)

    def _key(self, wl: Workload) -> tuple[object, ...]:
        """The merge key: borrowing, share, priority, submit time, name."""
        return self._prefix(wl) + self._of[id(wl)][1]

    def _prefix(self, wl: Workload) -> tuple[object, ...]:
        """(needs to borrow, weighted dominant share): the same for a shape, cached until its
        team's usage changes."""
        shape = self._of[id(wl)][0].uid
        version = self.state.version.get(wl.team, 0)
        cached = self._prefixes.get(shape)
        if cached is not None and cached[0] == version:
            return cached[1]
        prefix = self._compute_prefix(wl)
        self._prefixes[shape] = (version, prefix, wl.team)
        return prefix

    def _compute_prefix(self, wl: Workload) -> tuple[object, ...]:
        if wl.team not in self.model.teams:
            return (0, 0.0)
        flavors = self._flavors(wl)
        borrows = 0
        share = 0.0
        if flavors:
            usage = self._usage(wl, flavors[0])
            if not self.state.within_nominal(wl.team, usage):
                borrows = 1
                if self.policy.cluster.fair_share:
                    share = self.state.dominant_share(wl.team, usage)
        return (borrows, share)

    # -- one workload ----------------------------------------------------------------------

    def _pend(self, wl: Workload, reason: str) -> None:
        self._explicit[wl.name] = (wl, reason)
        segment = self._segments[-1]
        if isinstance(segment, list):
            segment.append(wl.name)

    def _consider(self, wl: Workload) -> None:
        self._done.add(wl.name)
        shape = self._of[id(wl)][0].uid
        memo = self._memo.get(shape)
        starving = self._may_reserve(wl, shape)
        if memo is not None and memo[0] == self._version and not starving:
            self._pend(wl, memo[1])  # the same shape failed since the last state change
            return
        version = self._version
        carried = self._carried.get(shape) if not version and not starving else None
        if carried is not None and not self.reservations and self._replay(wl, carried[1]):
            self._pend(wl, carried[0])
        else:
            self._options = []
            self._attempt(wl)
        if self._version == version and not starving and self._shortcuts:  # failed
            reason = self._explicit[wl.name][1]
            self._memo[shape] = (version, reason)
            options = carried[1] if carried is not None else self._options
            self._failures[shape] = (version, reason, wl, options)

    def _replay(self, wl: Workload, options: list[_Option]) -> bool:
        """The previous cycle at this moment ended with ``wl``'s shape failing, and this one
        starts in the same state (``_Carry``): quota and placement fail as then, for the same
        reason. Do what trying it again would do to the preemption part: note each search as
        failed, as one that cannot succeed would be. False if a search might succeed (the
        caller then tries in full; what was noted here is what trying notes first)."""
        state = self.state
        failed = self.failed_preemption
        attempt = self._attempt_of(wl)
        uid = self._of[id(wl)][0].uid
        for option in options:
            if failed.known_to_fail(wl, option.flavors, attempt):
                continue
            if may_have_own(state, wl):
                short = frozenset(contested_pairs(state, wl.team, option.usage))
                searched = (wl.team, wl.priority, uid, option.flavors)
                if self._failed_own.get(searched) != (self._evictions, short):
                    return False
            failed.record(wl, option.flavors, attempt)
        return True

    def _attempt(self, wl: Workload) -> None:
        rules = self.model.teams.get(wl.team)
        if rules is None:
            self._pend(wl, f"team {wl.team!r} has no quota policy")
            return
        if not rules.enabled:
            self._pend(wl, f"team {wl.team}'s quota is disabled")
            return
        flavors = self._flavors(wl)
        if not flavors:
            self._pend(wl, self._no_flavor(wl))
            return
        problems: list[str] = []
        options: list[_Option] = []
        self._held = None
        for flavor in flavors:  # the first flavor that fits within quota wins at once
            option = self._option(wl, flavor)
            options.append(option)
            if option.mode == _NOMINAL and self._try_place(wl, option, problems):
                return
        for option in options:
            if option.mode == _BORROW and self._try_place(wl, option, problems):
                return
        for option in options:
            if option.problem:
                problems.append(option.problem)
            if self._held_by(wl, option) is None and self._try_preemption(wl, option):
                return
        reason = self._held or "; ".join(dict.fromkeys(problems)) or "does not fit"
        self._pend(wl, reason)
        self._options = options
        self._maybe_reserve(wl, options[0])

    def _try_place(self, wl: Workload, option: _Option, problems: list[str]) -> bool:
        """Admit if the pods fit and no starving workload holds this one back."""
        held = self._held_by(wl, option)
        if held is not None:  # quota would allow it: the reservation is what stops it
            if self._held is None:
                self._held = held_message(held, option.usage, self.snapshot.now)
            return False
        plan = self.state.fit.place(option.flavors, wl.podsets)
        if isinstance(plan, NoFit):
            problems.append(plan.message)
            return False
        self._admit(wl, option, plan)
        return True

    def _flavors(self, wl: Workload) -> tuple[str, ...]:
        """Flavors that can hold every pod set, the team's own flavors first (cached)."""
        shape = self._of[id(wl)][0].uid
        found = self._flavor_cache.get(shape)  # shared by the cycles over the same nodes
        if found is None:
            rules = self.model.teams[wl.team]
            with_nodes = self.state.flavors_with_nodes
            order = [f for f in rules.flavor_order if f in with_nodes]
            order += sorted(with_nodes - set(order))
            fit = self.state.fit
            found = tuple(f for f in order if all(len(fit.eligible(f, ps)) for ps in wl.podsets))
            self._flavor_cache[shape] = found
        return found

    def _usage(self, wl: Workload, flavor: str) -> dict[FR, int]:
        """What ``wl`` asks for with every pod set on ``flavor`` (the same dictionary for a
        shape: never changed by its users)."""
        usages = self._of[id(wl)][0].usages
        found = usages.get(flavor)
        if found is None:
            found = usages[flavor] = usage_of(wl, (flavor,) * len(wl.podsets))
        return found

    def _option(self, wl: Workload, flavor: str) -> _Option:
        """One flavor for all pod sets, with its quota standing."""
        usage = self._usage(wl, flavor)
        problem = self.state.quota_problem(wl.team, usage)
        within = self.state.within_nominal(wl.team, usage)
        mode = _SHORT if problem is not None else _NOMINAL if within else _BORROW
        return _Option((flavor,) * len(wl.podsets), usage, mode, problem, within)

    def _no_flavor(self, wl: Workload) -> str:
        selectors = {k: v for ps in wl.podsets for k, v in ps.node_selector.items()}
        if not self.state.flavors_with_nodes:
            return "no Ready, schedulable nodes in the cluster"
        wanted = f" matching {selectors}" if selectors else ""
        return f"no Ready, schedulable node{wanted} admits every pod set (labels, taints)"

    # -- admission and preemption ----------------------------------------------------------

    def _admit(
        self,
        wl: Workload,
        option: _Option,
        plan: PlacementPlan,
        victims: list[Victim] = (),  # type: ignore[assignment]
    ) -> None:
        tree = self.state.tree
        before = {fr: tree.borrowed(wl.team, fr) for fr in option.usage}
        entry = Admitted(wl, option.flavors, option.usage, plan, self.snapshot.now, True)
        self.state.admit(entry)
        self._version += 1  # what failed before may fit now: forget the shapes that failed
        self.reservations.release(wl.name)
        borrowed: dict[str, int] = {}
        for fr in option.usage:
            extra = tree.borrowed(wl.team, fr) - before[fr]
            if extra > 0:
                borrowed[fr[1]] = borrowed.get(fr[1], 0) + extra
                if before[fr] == 0:  # the team's running work just became reclaimable
                    self.failed_preemption.forget({fr[0]})
        for victim in victims:
            self.result.preemptions.append(
                Preemption(victim.entry.workload, wl.name, victim.reason, self._why(victim, wl))
            )
        assignment = Assignment(option.flavors, self.state.fit.names(plan))
        self.result.admissions.append(Admission(wl, assignment, borrowed))

    def _why(self, victim: Victim, by: Workload) -> str:
        v = victim.entry.workload
        if victim.reason == "reclaim":
            return f"{by.team} reclaims its lent quota for {by.name}; {v.team} was borrowing"
        if victim.reason == "priority":
            return f"{by.name} (priority {by.priority}) preempts {v.name} (priority {v.priority})"
        return f"fair share: {by.team} borrows less than {v.team} (weighted dominant share)"

    def _attempt_of(self, wl: Workload) -> Attempt:
        shape = self._of[id(wl)][0]
        if shape.attempt is None:
            shape.attempt = Attempt.of(wl)
        return shape.attempt

    def _try_preemption(self, wl: Workload, option: _Option) -> bool:
        if self.failed_preemption.known_to_fail(wl, option.flavors, self._attempt_of(wl)):
            return False
        state = self.state
        # A search among the team's own work only (no reclaim, no fair share) that failed
        # fails again while nothing was evicted since and the same pairs are short: since
        # then, work was only added (taking room and quota), and work admitted in this cycle
        # is never a victim, so the candidates are the same and have less room to make.
        own_only = self._shortcuts and not self.policy.cluster.fair_share and not option.within
        searched = (wl.team, wl.priority, self._of[id(wl)][0].uid, option.flavors)
        short: set[FR] | None = None
        contested: tuple[int, frozenset[FR]] | None = None
        if own_only:
            if not may_have_own(state, wl):  # what find_victims would find at once
                self.failed_preemption.record(wl, option.flavors, self._attempt_of(wl))
                return False
            short = contested_pairs(state, wl.team, option.usage)
            contested = (self._evictions, frozenset(short))
            if self._failed_own.get(searched) == contested:
                self.failed_preemption.record(wl, option.flavors, self._attempt_of(wl))
                return False

        def fits() -> bool:
            if state.quota_problem(wl.team, option.usage) is not None:
                return False
            return not isinstance(state.fit.place(option.flavors, wl.podsets, explain=False), NoFit)

        victims = find_victims(state, wl, option.usage, fits, short)
        if victims is None:
            self.failed_preemption.record(wl, option.flavors, self._attempt_of(wl))
            if contested is not None:
                self._failed_own[searched] = contested
            return False
        self._evictions += 1
        plan = state.fit.place(option.flavors, wl.podsets)
        assert not isinstance(plan, NoFit), "victims were chosen so that the workload fits"
        self.failed_preemption.forget(
            set(option.flavors).union(*(v.entry.flavors for v in victims))
        )
        self._admit(wl, option, plan, victims)
        return True

    # -- starvation guard ------------------------------------------------------------------

    def _held_by(self, wl: Workload, option: _Option) -> Reservation | None:
        if not self.reservations:
            return None
        return self.reservations.held_by(wl, option.usage, option.within)

    def _starving(self, wl: Workload) -> bool:
        guard = self.policy.cluster.starvation_guard_seconds
        return guard is not None and self.snapshot.now - wl.submit_time >= guard

    def _may_reserve(self, wl: Workload, shape: int) -> bool:
        """Starving, and no earlier member of its shape holds a reservation: trying it may
        make one (so it is tried in full, never settled by its shape's failure)."""
        if not self._starving(wl):
            return False
        res = self._shape_reserved.get(shape)
        return res is None or not res.active or res.workload is wl

    def _reserve_starving(self) -> None:
        """Before the cycle: every starving workload that does not fit now reserves, so the
        order in which the cycle meets workloads cannot let later work slip past it."""
        now = self.snapshot.now
        guard = self.policy.cluster.starvation_guard_seconds
        assert guard is not None
        # a shape's members wait longest first, and only its first starving member reserves
        starving = [
            shape.wls[0] for shape in self.index.shapes.values() if now - shape.keys[0][1] >= guard
        ]
        for wl in sorted(starving, key=queue_key):
            rules = self.model.teams.get(wl.team)
            if rules is None or not rules.enabled or not self._starving(wl):
                continue
            flavors = self._flavors(wl)
            if not flavors:
                continue
            option = self._option(wl, flavors[0])
            free = self.state.fit.flavor_free
            if option.mode != _SHORT and all(v <= free(fr) for fr, v in option.usage.items()):
                continue  # probably fits; if it does not, the cycle reserves when it meets it
            self._maybe_reserve(wl, option)

    def _maybe_reserve(self, wl: Workload, option: _Option) -> None:
        if wl.name in self.reservations or not self._starving(wl):
            return
        shape = self._of[id(wl)][0].uid
        first = self._shape_reserved.get(shape)
        if first is not None and first.active:
            return  # an earlier member of its shape reserves; this one waits behind it
        if not self._could_ever_fit(wl, option):
            return
        usage = {fr: v for fr, v in option.usage.items() if v > 0}
        state = self.state
        team_only = any(
            value > state.ceiling(wl.team, fr)
            for fr, value in usage.items()
            if fr in self.model.governed
        )
        reservation = Reservation(wl, usage, team_only)
        self.reservations.add(reservation)
        self._shape_reserved[shape] = reservation
        self._version += 1  # a reservation may hold back what failed for another reason

    def _could_ever_fit(self, wl: Workload, option: _Option) -> bool:
        """Would the workload fit in an empty cluster, within its team's limits?"""
        node = self.model.nodes[wl.team]
        for fr, value in option.usage.items():
            if fr not in self.model.governed:
                continue
            ceiling = node.quota.get(fr, 0)
            limit = node.borrowing_limit.get(fr)
            ceiling += self.state.capacity.get(fr, 0) if limit is None else limit.amount
            if value > min(ceiling, self.state.capacity.get(fr, 0)):
                return False
        shape = (option.flavors, tuple((ps.count, *ps.requests.items()) for ps in wl.podsets))
        known = self._fits_empty.get(shape)
        if known is None:
            fit = self.state.fit
            saved = fit.free
            fit.free = fit.allocatable
            try:
                plan = fit.place(option.flavors, wl.podsets, explain=False)
                known = self._fits_empty[shape] = not isinstance(plan, NoFit)
            finally:
                fit.free = saved
        return known


@dataclass(slots=True)
class _Run:
    """Part of a cycle gone through in merge-key order: workloads attempted one by one (with
    their merge keys) and groups settled in bulk; in merge-key order together."""

    explicit: list[tuple[tuple[object, ...], str]] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)


class _Cursor:
    """A position in a queue's sorted run of workloads (a lane heap item)."""

    __slots__ = (
        "at",
        "end",
        "item",
        "keys",
        "lane",
        "names",
        "prefix",
        "reason",
        "shape",
        "start",
        "team",
        "valid",
        "wls",
    )

    def __init__(self, lane: str, prefix: tuple[object, ...], item: list[Any]) -> None:
        self.lane = lane
        self.prefix = prefix
        self.item = item
        shape: Shape = item[2]
        self.keys = shape.keys
        self.wls = shape.wls
        self.names = shape.names
        self.shape = shape.uid
        self.team = shape.team
        self.at: int = item[3]
        self.end: int = item[4]
        self.valid = False
        self.start = self.at
        self.reason = ""

    def key(self) -> tuple[object, ...]:
        return self.prefix + self.keys[self.at]

    def sync(self) -> None:
        """Write the position back into the queue's heap item."""
        item = self.item
        item[3] = self.at
        if self.at < self.end:
            item[0], item[1] = self.keys[self.at], self.wls[self.at]
