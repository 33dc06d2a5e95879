"""One admission cycle: consider every pending workload once, in merge order.

The loop (:meth:`Cycle.run`): starving workloads that do not fit reserve first
(``starvation.py``); then the cycle pulls workloads from the merge order (``ordering.py``)
and considers each: its flavor options (``flavors.py``: a flavor per pod set) — the first
within quota that places is taken, then the first borrowing one, then preemption per option —
or it stays pending with the reasons of every option. A workload that does not fit is
skipped, so a large job never blocks smaller ones behind it (no head-of-line blocking).

Shortcuts (off with ``shortcuts=False``, the plain algorithm they must agree with):

- a shape that failed since the last state change fails again, for the same reason
  (:class:`~fleetshare.governance.ordering.ShapeFailures`), unless it may reserve;
- a preemption search among the team's own work that failed fails again while nothing was
  evicted and the same pairs are short (work only got added since); such results, and the
  failures of the final state, carry over to the next cycle at the same moment when it starts
  where this one ended (:class:`Carry`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleetshare.governance.ahead import FailedAhead
from fleetshare.governance.fair_admission import FairOrder, queue_of, queue_weights
from fleetshare.governance.flavors import BORROWING, SHORT, WITHIN, Flavors, Option
from fleetshare.governance.ordering import (
    Failure,
    MergeKeys,
    MergeOrder,
    ShapeFailures,
)
from fleetshare.governance.partial import Counts, largest_fit
from fleetshare.governance.preemption import (
    Victim,
    contested_pairs,
    find_victims,
    may_have_own,
)
from fleetshare.governance.preemption_cache import Attempt, FailedPreemptions
from fleetshare.governance.queues import PendingMap, QueueKey, Shape
from fleetshare.governance.quota import FR, QuotaModel, TeamRules
from fleetshare.governance.snapshot import (
    Admission,
    Assignment,
    CycleResult,
    Preemption,
    Running,
    Snapshot,
)
from fleetshare.governance.starvation import StarvationGuard, held_message
from fleetshare.governance.state import Admitted
from fleetshare.model.reason import PendingReason, joined
from fleetshare.model.workload import Workload
from fleetshare.placement.fit import NoFit, PlacementPlan, TooLarge
from fleetshare.policy.schema import Policy, PreemptTeamTasks, StopPolicy

if TYPE_CHECKING:
    from fleetshare.governance.admission import CycleCache

OwnSearch = tuple[str, int, int, tuple[str, ...]]
"""A preemption search among a team's own work: (team, priority, shape uid, flavors)."""


@dataclass(slots=True)
class Carry:
    """Failed own-work preemption searches (see :meth:`Cycle._try_preemption`) that still
    fail in the next cycle, if it starts where this one ended: same moment, nodes and policy,
    the admissions applied, and no eviction. Not those whose team admitted work they may
    preempt: admitted in this cycle, it was no candidate; in the next, it is."""

    now: float
    model: QuotaModel
    preempted_since_change: frozenset[str]
    preempted_by: Mapping[str, frozenset[str]]
    admitted: dict[str, Assignment]
    failed_own: dict[OwnSearch, tuple[int, frozenset[FR]]]
    failed: dict[int, tuple[PendingReason, list[Option]]]
    """Shapes that failed in the final state, every option needing to borrow (so their
    searches are among their own team's work only): the reason and the options then."""
    prefixes: dict[int, tuple[str, tuple[object, ...]]]
    """Merge-key prefixes of shapes in the final state (with their team)."""


class Cycle:
    """One admission cycle over a snapshot (see :meth:`Engine.cycle
    <fleetshare.governance.admission.Engine.cycle>`)."""

    def __init__(
        self,
        model: QuotaModel,
        policy: Policy,
        snapshot: Snapshot,
        cache: CycleCache,
        shortcuts: bool = True,
    ) -> None:
        self.model = model
        self.policy = policy
        self.snapshot = snapshot
        self._shortcuts = shortcuts
        self._cache = cache
        state = self.state = cache.state.state(model, policy.cluster, snapshot)
        state.preempted_since_change = snapshot.preempted_since_change
        state.preempted_by = snapshot.preempted_by
        self.result = CycleResult(warnings=list(state.warnings))
        self.failed_preemption = FailedPreemptions()
        self._evictions = self._drain()
        self._failed_own: dict[OwnSearch, tuple[int, frozenset[FR]]] = {}
        prefixes: dict[int, tuple[object, tuple[object, ...], str]] = {}
        carry, cache.carry = cache.carry, None
        self._carried: dict[int, tuple[PendingReason, list[Option]]] = {}
        if (
            shortcuts
            and carry is not None
            and not self._evictions
            and self._continues(carry, cache.state.changes)
        ):
            self._failed_own = carry.failed_own
            self._carried = carry.failed
            start: dict[str, object] = {}  # every usage version is 0 at the start
            for uid, (team, p) in carry.prefixes.items():
                if team not in start:
                    start[team] = state.key_version(team)
                prefixes[uid] = (start[team], p, team)
        self._options: list[Option] = []
        """The options of the workload attempted last."""
        self._probing = False
        """Options are tried on paper only (partial admission's search): nothing admitted."""
        self._whole: dict[int, Workload] = {}
        """A workload with fewer pods being tried (by ``id``) -> the workload itself."""
        self._held: PendingReason | None = None
        self._too_large: set[TooLarge] = set()
        self._no_room: set[tuple[int, str]] = set()
        """(pod set index, flavor) pairs whose nodes had no room for the pod set in this
        search (``_place_elsewhere``)."""
        """What placements in the current search found too large for every node."""
        self._keeping = False
        self._ahead = FailedAhead(model)
        """Quota is kept from the workload being attempted (:meth:`_kept_for`): its failure
        says nothing about the rest of its shape."""
        """Why the workload being attempted is held back (starvation guard), if it is."""
        self._explicit: dict[str, tuple[Workload, PendingReason]] = {}
        """Workloads left pending one by one, with their reasons."""
        self._searched_at: dict[str, int] = {}
        """Workloads whose reason a search gave (it depends on the state), with the cycle's
        state changes (:meth:`_changes`) when it was given: :meth:`_refresh_reasons`."""
        self._known: dict[str, tuple[Workload, PendingReason]] = {}
        index = self.index = cache.pending
        index.update(model, snapshot.pending)
        self._of = index.of
        self.flavors = Flavors(model, state, index.of)
        self.keys = MergeKeys(
            model, state, self.flavors, index.of, policy.cluster.fair_share, prefixes
        )
        self.guard = StarvationGuard(
            policy.cluster.starvation_guard_seconds,
            snapshot.now,
            model,
            state,
            self.flavors,
            index.of,
            snapshot.namespaces,
        )
        self.failures = ShapeFailures()
        self._team_keys: dict[str, list[list[QueueKey]]] = {}
        for shape in index.shapes.values():
            self._team_keys.setdefault(shape.team, []).append(shape.keys)
        idle_limited = {name for name, node in model.nodes.items() if node.idle_percent}
        self._strict = frozenset(name for name, rules in model.teams.items() if rules.strict_fifo)
        """StrictFIFO teams."""
        self._blocked: dict[str, str] = {}
        """StrictFIFO teams whose queue is blocked in this cycle: by which workload."""
        self.fair: FairOrder | None = None
        settings = policy.cluster.admission_fair_sharing
        score: Callable[[Workload], float] | None = None
        if settings is not None and any(r.fair_admission for r in model.teams.values()):
            fair = self.fair = FairOrder(settings, snapshot.queue_usage, queue_weights(policy))
            score = lambda wl: fair.score(queue_of(wl))  # noqa: E731
        self.order = MergeOrder(
            self.keys,
            state,
            index.of,
            index.shapes.values(),
            self.failures,
            self.guard,
            idle_limited,
            shortcuts,
            score,
        )

    def _drain(self) -> int:
        """Evict the admitted work that a HoldAndDrain stop policy (its team's or its local
        queue's) drains, before anything is considered (Kueue evicts it, and it waits again
        while the stop holds); its quota and room are free for this cycle. Returns how many."""
        if not self.model.draining:
            return 0
        state = self.state
        teams = self.model.teams
        drained = [
            entry
            for team in self.model.draining
            for entry in state.by_team.get(team, ())
            if not entry.removed and teams[team].drains(entry.workload)
        ]
        drained.sort(key=lambda e: (e.workload.created, e.workload.name))
        for entry in drained:
            state.remove(entry)
            wl = entry.workload
            rules = teams[wl.team]
            held = wl.team if rules.stop != StopPolicy.NONE else f"local queue {wl.queue}"
            self.result.preemptions.append(
                Preemption(
                    wl,
                    wl.team,
                    "stopped",
                    f"{held} is stopped with stop policy HoldAndDrain: its admitted work is "
                    "evicted",
                )
            )
        return len(drained)

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> CycleResult:
        """Consider every pending workload once, in merge order."""
        failures = self.failures
        if self.guard.seconds is not None:
            failures.version += self.guard.reserve_starving(self.index.shapes.values())
        order = self.order
        result = self.result
        failed_preemption = self.failed_preemption
        tree = self.state.tree
        while (wl := order.next()) is not None:
            version = failures.version
            admitted = len(result.admissions)
            preempted = len(result.preemptions)
            forgets = failed_preemption.forgets
            deferred = self._ahead.deferral(wl, self.keys)
            if deferred is not None:
                self._pend(wl, deferred)
                order.failed(wl, reserved=False)
                continue
            kept = self._kept_for(wl)
            for team, usage in kept:
                tree.add(team, usage)
            self._consider(wl)
            for team, usage in kept:
                tree.add(team, usage, -1)
            if kept and wl.name in self._searched_at:  # a search found no room
                self._searched_at[wl.name] = -1  # given again at the end: see there
                keepers = sorted({team for team, _ in kept})
                reason = self._explicit[wl.name][1]
                self._pend(wl, reason.wrapped(f"{reason} (counting as in use the quota "
                           f"{', '.join(keepers)} keeps for its own pending work within quota)",
                           "quota-kept-for", *keepers))  # fmt: skip
            if len(result.admissions) == admitted:
                order.failed(wl, reserved=failures.version != version)
                self._ahead.failed(wl, self.keys.prefix(wl)[0] == 0)
                continue
            teams = {wl.team} | {p.workload.team for p in result.preemptions[preempted:]}
            if self.policy.cluster.fair_share:  # their groups' shares moved too
                peers = self.model.fair_peers
                teams = {peer for team in teams for peer in peers.get(team, (team,))}
            if wl.name in self._explicit:  # the room its victims left went to a teammate
                order.failed_after_change(wl, teams)
                self._ahead.failed(wl, self.keys.prefix(wl)[0] == 0)
                continue
            quiet = len(result.preemptions) == preempted and failed_preemption.forgets == forgets
            order.admitted(wl, teams, quiet)
        self._finish()
        result.wake_at = self._wake_at()
        self._leave_carry()
        return result

    def _kept_for(self, wl: Workload) -> list[tuple[str, dict[FR, int]]]:
        """Quota kept from ``wl`` while it is considered: what the other teams' held heads
        within quota ask for (:meth:`MergeOrder.held_within_quota`), counted as in use."""
        kept = []
        for head in self.order.held_within_quota(wl):
            usage = self.flavors.nominal_usage(head)
            if usage:
                kept.append((head.team, usage))
        self._keeping = bool(kept)
        return kept

    # -- one workload ----------------------------------------------------------------------

    def _consider(self, wl: Workload) -> None:
        if self._strict and wl.team in self._strict:
            self._consider_strict(wl)
            return
        shape = self._of[id(wl)][0].uid
        failures = self.failures
        starving = self.guard.may_reserve(wl, shape) or self._keeping  # tried in full
        failure = failures.by_shape.get(shape)
        if failure is not None and failure.version == failures.version and not starving:
            self._pend(wl, failure.reason)  # the same shape failed since the last state change
            self._searched_at[wl.name] = self._changes()
            return
        version = failures.version
        carried = self._carried.get(shape) if not version and not starving else None
        if carried is not None and not self.guard.reservations and self._replay(wl, carried[1]):
            self._pend(wl, carried[0])
            self._searched_at[wl.name] = self._changes()
        else:
            self._options = []
            self._attempt(wl)
        # a failure of work that may not preempt some workloads now says nothing about the rest
        # of its shape
        restricted = wl.name in self.snapshot.preempted_by or self._keeping
        if failures.version == version and not starving and self._shortcuts and not restricted:
            reason = self._explicit[wl.name][1]
            options = carried[1] if carried is not None else self._options
            failures.by_shape[shape] = Failure(version, reason, wl, options)

    def _consider_strict(self, wl: Workload) -> None:
        """A StrictFIFO team's workloads come in its queue order (one lane): the first that
        cannot be admitted blocks the rest for this cycle (Kueue requeues it at the head of
        its ClusterQueue at once). Its failures say nothing about the rest of its shape."""
        head = self._blocked.get(wl.team)
        if head is not None:
            self._pend(
                wl,
                PendingReason(
                    f"waits behind {head}: {wl.team} queues StrictFIFO and {head}, ahead in its "
                    "queue, cannot be admitted yet",
                    "queued",
                    ("strict-fifo", wl.team),
                ),
            )
            return
        self._options = []
        self._attempt(wl)
        rules = self.model.teams.get(wl.team)
        held = rules is None or rules.holds_queue(wl, self.snapshot.namespaces)
        if wl.name in self._explicit and held:
            self._blocked[wl.team] = wl.name

    def _pend(self, wl: Workload, reason: PendingReason) -> None:
        self._explicit[wl.name] = (wl, reason)

    def _attempt(self, wl: Workload) -> None:
        rules = self.model.teams.get(wl.team)
        if rules is None:
            message = f"team {wl.team!r} has no quota policy"
            self._pend(wl, PendingReason(message, "refused", ("no-quota-policy", wl.team)))
            return
        refusal = rules.refusal(wl, self.snapshot.namespaces)
        if refusal is not None:
            self._pend(wl, refusal)
            return
        flavors, split = self.flavors.admits(wl)
        if not flavors and (split is None or not all(split)):
            self._pend(wl, self.flavors.none_eligible(wl))
            return
        reason, options = self._search(wl, rules, flavors, split)
        if reason is None or self._partially(wl, rules):
            return
        self._pend(wl, reason)
        self._searched_at[wl.name] = self._changes()
        self._options = options
        if self.guard.reserve(wl, options[0]):
            self.failures.version += 1  # a reservation may hold back what failed otherwise

    def _search(
        self,
        wl: Workload,
        rules: TeamRules,
        flavors: tuple[str, ...],
        split: tuple[tuple[str, ...], ...] | None,
    ) -> tuple[PendingReason | None, list[Option]]:
        """Try ``wl``'s options: placement within quota, borrowing, preemption (admitting it,
        or, probing, only finding that it would be). None and the options when it was; else
        why not."""
        problems: list[PendingReason] = []
        options: list[Option] = []
        placed: set[int] = set()
        """Options whose placement was tried already (by index)."""
        preempted: set[int] = set()
        """Options whose preemption search was tried already."""
        self._held = None
        self._too_large.clear()
        self._no_room.clear()
        # the flavor search (Kueue's flavor fungibility): in the team's order, the first flavor
        # within quota wins at once, and so does the first that borrows (when_can_borrow:
        # Borrow) or whose preemption makes room (when_can_preempt: Preempt)
        for flavor in flavors:
            option = self.flavors.option(wl, flavor)
            options.append(option)
            index = len(options) - 1
            if option.mode == WITHIN or (option.mode == BORROWING and rules.stop_at_borrowing):
                placed.add(index)
                if self._try_place(wl, option, problems):
                    return None, options
            elif (
                option.mode != BORROWING
                and rules.stop_at_preemption
                and (option.within or rules.stop_at_borrowing)
            ):
                preempted.add(index)
                if option.problem:
                    problems.append(option.problem)
                if self.guard.held_by(wl, option) is None and self._try_preemption(wl, option):
                    return None, options
        if split is not None:  # pod sets admitted by different flavors: Kueue's assignment
            assigned = self.flavors.assign(wl)
            if assigned is not None:
                options.append(assigned)
                if assigned.mode == WITHIN:
                    placed.add(len(options) - 1)
                    if self._try_place(wl, assigned, problems):
                        return None, options
        for index, option in enumerate(options):
            if option.mode == BORROWING and index not in placed:
                placed.add(index)
                if self._try_place(wl, option, problems):
                    return None, options
        if split is not None and self._no_room and self._place_elsewhere(wl, options, problems):
            return None, options
        for index, option in enumerate(options):
            if index in preempted:
                continue
            if option.problem:
                problems.append(option.problem)
            if self.guard.held_by(wl, option) is None and self._try_preemption(wl, option):
                return None, options
        if self._held is None and options:
            # quota is checked before the nodes: say first when no node could ever hold a pod
            larger = [self.state.fit.larger_than_every_node(o.flavors, wl.podsets) for o in options]
            first = larger[0]
            if first is not None and all(larger) and first not in self._too_large:
                problems.insert(0, PendingReason(str(first), "too-large", first.gist))
        if self._held is not None:
            return self._held, options
        if not problems:
            return PendingReason("does not fit", "capacity", ("does-not-fit",)), options
        return joined(problems), options

    def _partially(self, wl: Workload, rules: TeamRules) -> bool:
        """Partial admission (``partial.py``): when ``wl`` does not fit whole and a pod set may
        run with fewer pods, admit it with the most pods that fit (found on paper, each
        count tried as in full), if some count does. True if admitted."""
        if not any(ps.min_count is not None for ps in wl.podsets):
            return False
        shapes: dict[Counts, Shape] = {}

        def attempt(counts: Counts, probe: bool) -> bool:
            reduced = wl.with_counts(counts)
            shape = shapes.get(counts)
            if shape is None:
                shape = shapes[counts] = Shape(("partial", counts), wl.team)
            self._of[id(reduced)] = (shape, self._of[id(wl)][1], reduced)
            self._whole[id(reduced)] = wl
            self._probing = probe
            try:
                flavors, split = self.flavors.admits(reduced)
                if not flavors and (split is None or not all(split)):
                    return False
                return self._search(reduced, rules, flavors, split)[0] is None
            finally:
                self._probing = False
                del self._of[id(reduced)], self._whole[id(reduced)]

        try:
            counts = largest_fit(wl, lambda c: attempt(c, probe=True))
            return counts is not None and attempt(counts, probe=False)
        finally:
            self.flavors.forget(shape.uid for shape in shapes.values())

    def _try_place(self, wl: Workload, option: Option, problems: list[PendingReason]) -> bool:
        """Admit if the pods fit and no starving workload holds this one back."""
        held = self.guard.held_by(wl, option)
        if held is not None:  # quota would allow it: the reservation is what stops it
            if self._held is None:
                self._held = held_message(held, option.usage, self.snapshot.now, wl.team)
            return False
        plan = self.state.fit.place(option.flavors, wl.podsets)
        if isinstance(plan, NoFit):
            if plan.too_large is not None:
                self._too_large.add(plan.too_large)
            index = next(i for i, ps in enumerate(wl.podsets) if ps.name == plan.podset)
            self._no_room.add((index, option.flavors[index]))
            problems.append(self._no_room_reason(wl, option, plan))
            return False
        if not self._probing:
            self._admit(wl, option, plan)
        return True

    def _place_elsewhere(
        self, wl: Workload, options: list[Option], problems: list[PendingReason]
    ) -> bool:
        """When pod sets may run on different flavors and a pod set found no room on the
        flavor its options gave it: the assignment again with that flavor left out for that
        pod set, while one within quota or borrowing comes out that was not tried (Kueue's
        topology-aware flavor assigner likewise moves a pod set whose topology cannot hold
        it to its next flavor). True when ``wl`` was admitted (or, probing, would be). The
        new options join ``options``, so the preemption search may use them too."""
        tried = {option.flavors for option in options}
        while True:
            assigned = self.flavors.assign(wl, frozenset(self._no_room))
            if assigned is None or assigned.mode == SHORT or assigned.flavors in tried:
                return False
            tried.add(assigned.flavors)
            options.append(assigned)
            if self._try_place(wl, assigned, problems):
                return True

    def _no_room_reason(self, wl: Workload, option: Option, plan: NoFit) -> PendingReason:
        """Why ``wl`` finds no room with ``option`` (a ``capacity`` reason, keyed as
        ``plan``); for work within its quota, whether that is because quotas promise more
        than the nodes offer (the admin's over-commitment, not the team's doing: keyed
        ``("overcommitted", plan's key, flavor, resource)``)."""
        over = self.state.overcommitted(option.usage) if option.mode == WITHIN else None
        if not over:
            return PendingReason(plan.message, "capacity", plan.gist)
        flavor, resource = over[0]
        return PendingReason(
            f"{plan.message} (the work is within {wl.team}'s quota, but quotas for {resource} "
            f"on {flavor} add up to more than its Ready nodes offer: it waits for capacity)",
            "capacity",
            ("overcommitted", plan.gist, flavor, resource),
        )

    # -- admission and preemption ----------------------------------------------------------

    def _admit(
        self,
        wl: Workload,
        option: Option,
        plan: PlacementPlan,
        victims: list[Victim] = (),  # type: ignore[assignment]
    ) -> None:
        tree = self.state.tree
        whole = self._whole.get(id(wl), wl)  # ``wl`` with fewer pods, if partially admitted
        counts = tuple(ps.count for ps in wl.podsets) if whole is not wl else ()
        before = {fr: tree.borrowed(wl.team, fr) for fr in option.usage}
        entry = Admitted(
            whole, option.flavors, option.usage, plan, self.snapshot.now, True, podsets=wl.podsets
        )
        self.state.admit(entry)
        if self.fair is not None and self.model.teams[wl.team].fair_admission:
            self.fair.admitted(whole)
        self.failures.version += 1  # what failed before may fit now
        self.guard.reservations.release(wl.name)
        borrowed: dict[str, int] = {}
        for fr in option.usage:
            extra = tree.borrowed(wl.team, fr) - before[fr]
            if extra > 0:
                borrowed[fr[1]] = borrowed.get(fr[1], 0) + extra
                if before[fr] == 0:  # the team's running work just became reclaimable
                    self.failed_preemption.forget({fr[0]})
        self._report(victims, wl)
        names = self.state.fit.names(plan)
        assignment = Assignment(option.flavors, names, tuple(plan.gpus), counts)
        self.result.admissions.append(Admission(whole, assignment, borrowed))

    def _report(self, victims: list[Victim], by: Workload) -> None:
        for victim in victims:
            self.result.preemptions.append(
                Preemption(victim.entry.workload, by.name, victim.reason, self._why(victim, by))
            )

    def _why(self, victim: Victim, by: Workload) -> str:
        v = victim.entry.workload
        if victim.reason == "reclaim":
            return f"{by.team} reclaims its lent quota for {by.name}; {v.team} was borrowing"
        if victim.reason == "priority":
            return f"{by.name} (priority {by.priority}) preempts {v.name} (priority {v.priority})"
        if victim.reason == "reclaim-while-borrowing":
            return (
                f"{by.name} (priority {by.priority}) must borrow and preempts borrowed work of "
                f"lower priority: {v.name} (priority {v.priority}) of {v.team}"
            )
        mine, theirs = self.model.below_common(by.team, v.team)  # where their paths meet
        if (mine, theirs) != (by.team, v.team):
            return (
                f"fair share: {mine} (of {by.team}) borrows less than {theirs} (of {v.team}) "
                "(weighted dominant share)"
            )
        return f"fair share: {by.team} borrows less than {v.team} (weighted dominant share)"

    def _attempt_of(self, wl: Workload) -> Attempt:
        shape = self._of[id(wl)][0]
        if shape.attempt is None:
            shape.attempt = Attempt.of(wl)
        return shape.attempt

    def _try_preemption(self, wl: Workload, option: Option) -> bool:
        if self.failed_preemption.known_to_fail(wl, option.flavors, self._attempt_of(wl)):
            return False
        if wl.name in self.snapshot.preempted_by:
            # it may not preempt those that preempted it: a search of its own, not memoised
            # for the rest of its shape
            victims = find_victims(self.state, wl, option.usage, self._fits(wl, option), None)
            return victims is not None and self._preempt(wl, option, victims)
        state = self.state
        # A search among the team's own work only (no reclaim, no fair share) that failed
        # fails again while nothing was evicted since and the same pairs are short: since
        # then, work was only added (taking room and quota), and work admitted in this cycle
        # is never a victim, so the candidates are the same and have less room to make.
        own_only = (
            self._shortcuts
            and not self.policy.cluster.fair_share
            and not option.within
            and not self.model.teams[wl.team].borrow_within
        )
        searched = (wl.team, wl.priority, self._of[id(wl)][0].uid, option.flavors)
        short: set[FR] | None = None
        contested: tuple[int, frozenset[FR]] | None = None
        if own_only:
            if not may_have_own(state, wl):  # what find_victims would find at once
                self._failed_search(wl, option)
                return False
            short = contested_pairs(state, wl.team, option.usage)
            contested = (self._evictions, frozenset(short))
            if self._failed_own.get(searched) == contested:
                self._failed_search(wl, option)
                return False
        victims = find_victims(state, wl, option.usage, self._fits(wl, option), short)
        if victims is None:
            self._failed_search(wl, option)
            if contested is not None and not self._keeping:
                self._failed_own[searched] = contested
            return False
        return self._preempt(wl, option, victims)

    def _failed_search(self, wl: Workload, option: Option) -> None:
        """Remember a failed preemption search, unless quota was kept from it (a search with
        more quota may succeed)."""
        if not self._keeping:
            self.failed_preemption.record(wl, option.flavors, self._attempt_of(wl))

    def _fits(self, wl: Workload, option: Option) -> Callable[[], bool]:
        """Whether ``wl`` fits now with ``option`` (quota, then placement), for searches."""
        state = self.state

        def fits() -> bool:
            if state.quota_problem(wl.team, option.usage) is not None:
                return False
            return not isinstance(state.fit.place(option.flavors, wl.podsets, explain=False), NoFit)

        return fits

    def _preempt(self, wl: Workload, option: Option, victims: list[Victim]) -> bool:
        """Admit ``wl`` in the room its victims (already removed from the state) made
        (probing a partial admission's count: put them back, it would be admitted)."""
        if self._probing:
            for victim in victims:
                self.state.restore(victim.entry)
            return True
        self._evictions += 1
        self._ahead.evicted()
        for victim in victims:
            self._ahead.victim(victim.entry.workload)
        self.failed_preemption.forget(
            set(option.flavors).union(*(v.entry.flavors for v in victims))
        )
        for ahead in self._ahead.preempting(wl, self.keys):
            if (
                self._keeps(ahead, victims)
                and self._explain(ahead, self._explicit[ahead.name][1]) is None
            ):
                self._hand_over(wl, victims, ahead)
                return True
        plan = self.state.fit.place(option.flavors, wl.podsets)
        assert not isinstance(plan, NoFit), "victims were chosen so that the workload fits"
        self._admit(wl, option, plan, victims)
        return True

    def _keeps(self, ahead: Workload, victims: list[Victim]) -> bool:
        """Would ``ahead``, admitted in the room of ``victims``, keep it at this instant? Yes
        if it stays within its team's quota; if it borrows, only while no other team has work
        within its quota, pending or among the victims, that could take the lent quota back
        (else the room would pass from team to team, each reclaim starting work only for the
        next to preempt it)."""
        state = self.state
        usage = self.flavors.nominal_usage(ahead)
        if usage is not None and state.within_nominal(ahead.team, usage):
            return True
        for victim in victims:
            v = victim.entry
            if v.workload.team != ahead.team and state.within_nominal(v.workload.team, v.usage):
                return False
        for shape in self.index.shapes.values():
            if not shape.wls or shape.team == ahead.team or shape.team not in self.model.teams:
                continue
            other = self.flavors.nominal_usage(shape.wls[0])
            if other is not None and state.within_nominal(shape.team, other):
                return False
        return True

    def _hand_over(self, wl: Workload, victims: list[Victim], ahead: Workload) -> None:
        """``wl``'s victims are out, and ``ahead``, of its team, tried before it in this cycle
        and allowed to preempt it, fits in the room they left: ``ahead`` is admitted and
        ``wl`` stays pending (``ahead.py``), rather than starting ``wl`` only for ``ahead`` to
        preempt it in the next cycle at this instant."""
        self._report(victims, wl)
        self.failures.version += 1  # room was freed
        self._pend(
            self._whole.get(id(wl), wl),  # ``wl`` with fewer pods, if partially admitted
            PendingReason(
                f"waits for {ahead.name}, ahead of it in {wl.team}'s queue: {ahead.name} took "
                f"the room that preempting for {wl.name} freed",
                "queued",
                ("handed-over", wl.team),
            ),
        )
        del self._explicit[ahead.name]
        self.order.taken(ahead.name)
        self._searched_at.pop(ahead.name, None)
        self._ahead.taken(ahead)
        options = self._options
        self._attempt(ahead)
        self._options = options
        assert ahead.name not in self._explicit, "it fitted on paper in this very state"

    # -- what carries over to the next cycle at the same moment ------------------------------

    def _replay(self, wl: Workload, options: list[Option]) -> bool:
        """The previous cycle at this moment ended with ``wl``'s shape failing, and this one
        starts in the same state (:class:`Carry`): quota and placement fail as then, for the
        same reason. Do what trying it again would do to the preemption part: note each search
        as failed, as one that cannot succeed would be. False if a search might succeed (the
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

    def _continues(self, carry: Carry, changes: tuple[bool, int, list[Running]]) -> bool:
        """Does this cycle start where the carrying one ended?"""
        rebuilt, gone, added = changes
        if rebuilt or gone or carry.now != self.snapshot.now or carry.model is not self.model:
            return False
        if (carry.preempted_since_change, carry.preempted_by) != (
            self.snapshot.preempted_since_change,
            self.snapshot.preempted_by,
        ):
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
            """Is nothing the team admitted a candidate for its own work at ``priority``?
            (Never said of a team whose borrowing work preempts others': its searches are not
            among its own work only.)"""
            if self.model.teams[team].borrow_within:
                return False
            if team not in lowest:
                return True
            rule = self.model.teams[team].preempt_team_tasks
            if rule == PreemptTeamTasks.NEVER:
                return True
            if rule == PreemptTeamTasks.LOWER_OR_NEWER_EQUAL_PRIORITY:
                return lowest[team] > priority
            return lowest[team] >= priority

        kept = {key: v for key, v in self._failed_own.items() if same_candidates(*key[:2])}
        failed: dict[int, tuple[PendingReason, list[Option]]] = {}
        if not self.guard.reservations and not self.policy.cluster.fair_share:
            version = self.failures.version
            for uid, failure in self.failures.by_shape.items():
                wl = failure.workload
                if (
                    failure.version == version
                    and (wl.team not in self.model.teams or same_candidates(wl.team, wl.priority))
                    and not any(option.within for option in failure.options)
                ):
                    failed[uid] = (failure.reason, failure.options)
        key_version = self.state.key_version
        prefixes = {
            uid: (team, prefix)
            for uid, (version, prefix, team) in self.keys.prefixes.items()
            if version == key_version(team)
        }
        self._cache.carry = Carry(
            self.snapshot.now,
            self.model,
            self.snapshot.preempted_since_change,
            self.snapshot.preempted_by,
            admitted,
            kept,
            failed,
            prefixes,
        )

    # -- the result ------------------------------------------------------------------------

    def _changes(self) -> int:
        """State changes so far in this cycle: admissions and evictions."""
        return len(self.result.admissions) + len(self.result.preemptions)

    def _refresh_reasons(self) -> None:
        """A reason's numbers are those at the end of the cycle: a search's reason given
        before a later admission or eviction, and every bulk group's, is given again by the
        same search on paper in the final state, once per shape and reason. Work that would
        fit by then (an eviction freed room after it was tried) keeps its reason, saying so:
        it goes first in the next cycle (``ahead.py``). Work tried while other teams' quota
        was kept for them (:meth:`_kept_for`) keeps that reason if it would fit without it,
        and is given the final state's otherwise."""
        final = self._changes()
        if not final and all(at >= 0 for at in self._searched_at.values()):
            return
        fresh: dict[tuple[int, str], PendingReason] = {}

        def again(wl: Workload, reason: PendingReason, kept: bool = False) -> PendingReason:
            key = (self._of[id(wl)][0].uid, reason)
            found = fresh.get(key)
            if found is None:
                now = self._explain(wl, reason)
                if now is None and kept:
                    now = reason
                elif now is None:
                    now = reason.wrapped(
                        f"{reason} (when it was tried; room was freed later in the cycle)",
                        "room-freed-later",
                    )
                found = fresh[key] = now
            return found

        explicit = self._explicit
        for name, at in self._searched_at.items():
            if at < final:
                wl, reason = explicit[name]
                explicit[name] = (wl, again(wl, reason, kept=at < 0))
        if final:
            for group in self.order.groups:
                group.reason = again(group.wls[group.start], group.reason)

    def _explain(self, wl: Workload, reason: PendingReason) -> PendingReason | None:
        """Why ``wl`` does not fit now, found as :meth:`_attempt` finds it, on paper; None if
        it would; ``reason`` when it is not the search's (no team, refused, no flavor)."""
        rules = self.model.teams.get(wl.team)
        if rules is None or rules.refusal(wl, self.snapshot.namespaces) is not None:
            return reason
        flavors, split = self.flavors.admits(wl)
        if not flavors and (split is None or not all(split)):
            return reason
        self._probing = True
        try:
            return self._search(wl, rules, flavors, split)[0]
        finally:
            self._probing = False

    def _finish(self) -> None:
        """The pending result, and which reasons changed since the previous cycle."""
        self._refresh_reasons()
        admitted: dict[str, list[QueueKey]] = {}
        for admission in self.result.admissions:
            wl = admission.workload
            admitted.setdefault(wl.team, []).append(self._of[id(wl)][1])
        for keys in admitted.values():
            keys.sort()
        changed = self._changed()
        self.result.pending = PendingMap(
            self._explicit,
            self.order.segments,
            self.order.groups,
            self._team_keys,
            admitted,
            self._known,
        )
        self.result.pending_changed = changed

    def _changed(self) -> list[str]:
        index = self.index
        last_explicit, last_bulk = index.last_explicit, index.last_bulk
        explicit = self._explicit

        def differs(name: str, wl: Workload, reason: PendingReason) -> bool:
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
        bulk_now: dict[int, dict[PendingReason, set[str]]] = {}
        for segment in self.order.segments:
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
            for g in self.order.groups:  # one shape: in submit order, so the first after now
                at = bisect_right(g.keys, now, g.start, g.end, key=lambda k: k[1] + guard)
                if at < g.end:
                    times.append(g.wls[at].submit_time + guard)
        return min(times, default=None)
