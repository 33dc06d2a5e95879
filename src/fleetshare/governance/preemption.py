"""Choosing preemption victims: never more than needed, never in a loop.

Three reasons to preempt, as in Kueue and HyperPod:

- **reclaim** — a team wants work within its own quota, which is lent out: borrowers are
  preempted (lowest priority, most recently admitted first) while they still borrow.
- **priority** — within a team, higher-priority work preempts lower (PreemptTeamTasks).
- **fair-share** — with fair sharing on, a team that borrows less (weighted dominant resource
  share) may preempt borrowed work of a team that borrows more, but only while the preemptor's
  share after stays at or below the target's share after (or below its share before): the
  target can never preempt straight back, so there is no ping-pong. Nor is work evicted by
  fair share when that would take its team below its own quota while the team has work
  waiting that fits there: the team would reclaim at once, and round it would go.
- **reclaim-while-borrowing** — without fair share, work that must borrow may preempt other
  teams' borrowing work of a lower priority (and at most ``max_priority_threshold``) when its
  team sets ``borrow_within_cohort`` (Kueue's ``borrowWithinCohort``), taken like reclaim's
  victims while their team still borrows; then its own team's lower-priority work.

Victims are removed greedily until the preemptor fits, then the set is minimised: each victim
is put back, newest choice first, if the preemptor still fits without evicting it. Work younger
than the configured minimum runtime (or reclaim grace) is never a victim, nor is work admitted
in the same cycle, nor work already preempted since the world last changed (a submission, a
finish, a node or policy change), nor work that preempted the preemptor since then: while
nothing changes no workload is preempted twice and no pair goes admit -> preempt -> admit, so
preemption always ends, whatever mix of reclaim, priority and fair share drives it
(``Snapshot.preempted_since_change`` and ``preempted_by``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from fleetshare.governance.defragment import defragment
from fleetshare.governance.fair_pairs import FairPairs
from fleetshare.governance.quota import FR
from fleetshare.governance.snapshot import PreemptionReason
from fleetshare.governance.state import Admitted, CycleState
from fleetshare.model.workload import Workload
from fleetshare.policy.schema import PreemptTeamTasks, ReclaimPolicy, StopPolicy


@dataclass(frozen=True, slots=True)
class Victim:
    """A workload to evict, and why."""

    entry: Admitted
    reason: PreemptionReason


def _order(entries: list[Admitted]) -> list[Admitted]:
    """Lowest priority first, then most recently admitted first, then the youngest (latest
    submitted, then latest created): older work keeps running, as in FIFO."""
    return sorted(
        entries,
        key=lambda e: (
            e.workload.priority,
            -e.admitted_at,
            -e.workload.submit_time,
            -e.workload.created,
        ),
    )


def _spared(state: CycleState, by: Workload) -> frozenset[str]:
    """Work ``by`` may not preempt whatever else holds: preempted already since the world last
    changed, or having preempted ``by`` since then (``Snapshot.preempted_since_change`` and
    ``preempted_by``)."""
    mine = state.preempted_by.get(by.name)
    return state.preempted_since_change | mine if mine else state.preempted_since_change


def _old_enough(entry: Admitted, now: float, minimum: float, spared: frozenset[str]) -> bool:
    """May be a victim: not admitted in this cycle, past the minimum runtime, not spared."""
    return (
        not entry.this_cycle
        and now - entry.admitted_at >= minimum
        and (not spared or entry.workload.name not in spared)
    )


def _own_candidates(state: CycleState, wl: Workload, contested: set[FR]) -> list[Admitted]:
    rule = state.model.teams[wl.team].preempt_team_tasks
    if rule == PreemptTeamTasks.NEVER:
        return []
    minimum = state.cluster.preemption.min_runtime_seconds
    spared = _spared(state, wl)
    out = []
    for entry in state.entries(wl.team, {fr[0] for fr in contested}):
        other = entry.workload
        if entry.removed or not contested & entry.usage.keys():
            continue
        lower = other.priority < wl.priority
        newer_equal = (
            rule == PreemptTeamTasks.LOWER_OR_NEWER_EQUAL_PRIORITY
            and other.priority == wl.priority
            and other.submit_time > wl.submit_time
        )
        if (lower or newer_equal) and _old_enough(entry, state.now, minimum, spared):
            out.append(entry)
    return _order(out)


def may_have_own(state: CycleState, wl: Workload) -> bool:
    """Could the team have work of its own that ``wl`` may preempt (by priority alone)?"""
    rule = state.model.teams[wl.team].preempt_team_tasks
    if rule == PreemptTeamTasks.NEVER:
        return False
    lowest = state.lowest_priority(wl.team)
    if lowest is None:
        return False
    if rule == PreemptTeamTasks.LOWER_OR_NEWER_EQUAL_PRIORITY:
        return lowest <= wl.priority
    return lowest < wl.priority


def _borrowing(state: CycleState, team: str, frs: Iterable[FR]) -> bool:
    return any(state.tree.borrowed(team, fr) > 0 for fr in frs)


def _borrow_within(state: CycleState, wl: Workload, reclaiming: bool) -> bool:
    """Does ``wl`` preempt other teams' borrowing work to borrow itself (Kueue
    borrowWithinCohort)? Only when it must borrow and fair share is off (the rule is compiled
    off with fair share)."""
    return not reclaiming and state.model.teams[wl.team].borrow_within


def _lenders(
    state: CycleState,
    wl: Workload,
    contested: set[FR],
    keep: Callable[[str], bool] | None = None,
) -> list[str]:
    """Other teams borrowing what ``wl`` needs (with fair share: those ``keep`` keeps); not a
    stopped team (Kueue leaves an inactive ClusterQueue's workloads out of the candidates)."""
    teams = state.model.teams
    if teams[wl.team].reclaim == ReclaimPolicy.NEVER:
        return []
    return [
        team
        for team in state.by_team
        if team != wl.team
        and team in teams
        and teams[team].stop == StopPolicy.NONE
        and _borrowing(state, team, contested)
        and (keep is None or keep(team))
    ]


def _other_candidates(
    state: CycleState,
    wl: Workload,
    contested: set[FR],
    teams: list[str],
    minimum: float,
    borrowing: bool = False,
) -> list[Admitted]:
    """Admitted work of the lending ``teams`` that uses what ``wl`` needs; ``borrowing``: for
    work that must borrow (borrowWithinCohort), only work of a lower priority, at most the
    team's threshold."""
    rules = state.model.teams[wl.team]
    rule = rules.reclaim
    below = wl.priority
    if borrowing:
        rule = ReclaimPolicy.LOWER_PRIORITY
        if rules.borrow_max_priority is not None:
            below = min(below, rules.borrow_max_priority + 1)
    spared = _spared(state, wl)
    out = []
    flavors = {fr[0] for fr in contested}
    for team in teams:
        for entry in state.entries(team, flavors):
            other = entry.workload
            if entry.removed or not contested & entry.usage.keys():
                continue
            if rule == ReclaimPolicy.LOWER_PRIORITY and other.priority >= below:
                continue
            if _old_enough(entry, state.now, minimum, spared):
                out.append(entry)
    return _order(out)


Fits = Callable[[], bool]


def find_victims(
    state: CycleState,
    wl: Workload,
    usage: dict[FR, int],
    fits: Fits,
    contested: set[FR] | None = None,
) -> list[Victim] | None:
    """Victims that let ``wl`` (requesting ``usage``) fit, or None; state is left unchanged.

    ``contested``: :func:`contested_pairs` if the caller has it already.
    """
    reclaiming = state.within_nominal(wl.team, usage)
    borrowing = _borrow_within(state, wl, reclaiming)
    if (
        not reclaiming
        and not state.cluster.fair_share
        and not borrowing
        and not may_have_own(state, wl)
    ):
        return None  # no other team's work is at stake, and none of its own may go
    if contested is None:
        contested = _short(state, wl.team, usage)
    if not reclaiming and not borrowing and not state.cluster.fair_share:
        found = _reclaim_to_nominal(state, wl, usage, contested, fits)
        if found is not None:
            return found
    settings = state.cluster.preemption
    lenders: list[str] = []
    pairs = FairPairs(state, wl, usage)
    if reclaiming or borrowing:
        lenders = _lenders(state, wl, contested)
    elif state.cluster.fair_share:
        # only a team whose share is at least the preemptor's share after admission can lose
        # (each compared where their paths meet)
        lenders = _lenders(
            state,
            wl,
            contested,
            lambda team: pairs.target_share(team, {}) >= pairs.preemptor_after(team),
        )
    if _hopeless(state, wl, usage, contested, lenders):
        return None
    own = _own_candidates(state, wl, contested)
    minimum = settings.reclaim_grace_seconds if reclaiming else settings.min_runtime_seconds
    if borrowing:  # borrowed work taken for priority: both guards hold
        minimum = max(settings.min_runtime_seconds, settings.reclaim_grace_seconds)
    others = _other_candidates(state, wl, contested, lenders, minimum, borrowing) if lenders else []
    if not own and not others:
        return None
    if not _could_fit_without(state, wl.team, usage, [*own, *others]):
        return None
    chosen: list[Victim] = []

    def take(entry: Admitted, reason: PreemptionReason) -> None:
        state.remove(entry)
        chosen.append(Victim(entry, reason))

    def done() -> bool:  # the cheap aggregate check first, the real one only when it passes
        return _may_fit(state, wl.team, usage, contested, {}) and fits()

    if reclaiming:
        _evict_in_batches(state, wl, usage, contested, others, fits, take, "reclaim")
        if not fits() and state.quota_problem(wl.team, usage) is None:
            for victim in chosen:  # the quota is back but no node has room: by node instead
                state.restore(victim.entry)
            chosen.clear()
            by_node = defragment(state, wl, contested, others, fits)
            if by_node is None:
                _evict_in_batches(state, wl, usage, contested, others, fits, take, "reclaim")
            else:
                chosen.extend(Victim(entry, "reclaim") for entry in by_node)
    elif borrowing:
        _evict_in_batches(
            state, wl, usage, contested, others, fits, take, "reclaim-while-borrowing"
        )
    elif others:
        _fair_share(state, wl, usage, contested, others, fits, take, pairs)
    if not fits():
        _evict_in_batches(state, wl, usage, contested, own, fits, take, "priority")
    if not fits():
        for victim in chosen:
            state.restore(victim.entry)
        return None
    return _minimise(state, chosen, done)


def _reclaim_to_nominal(
    state: CycleState, wl: Workload, usage: dict[FR, int], contested: set[FR], fits: Fits
) -> list[Victim] | None:
    """Victims for work that would borrow, of a team still under its quota on every contested
    pair: other teams' borrowing work together with the team's own lower-priority work, so
    that the preemptor then fits *within* its quota; None if there are no such victims.

    Kueue (classical preemption, ``queueUnderNominalInResourcesNeedingPreemption``): a
    ClusterQueue under its nominal quota in the resources needing preemption first tries
    every candidate, its own and the cohort's borrowers, without borrowing; only then its
    own candidates with borrowing (the caller's search). Without it, a team whose own work
    must make room could not take back what it lent at the same time, and admitted other
    work in the meantime only to preempt it once the borrower was gone.
    """
    tree = state.tree
    governed = state.model.governed
    if not contested or any(
        fr in governed and tree.usage(wl.team, fr) >= tree.quota(wl.team, fr) for fr in contested
    ):
        return None
    own = _own_candidates(state, wl, contested)
    lenders = _lenders(state, wl, contested)
    if not own or not lenders:
        return None  # the caller's search covers it
    grace = state.cluster.preemption.reclaim_grace_seconds
    others = _other_candidates(state, wl, contested, lenders, grace)
    if not others:
        return None

    def within() -> bool:
        return state.within_nominal(wl.team, usage) and fits()

    chosen: list[Victim] = []

    def take(entry: Admitted, reason: PreemptionReason) -> None:
        state.remove(entry)
        chosen.append(Victim(entry, reason))

    rest = iter(own)
    for entry in rest:  # first its own work, until the preemptor is within the quota
        if state.within_nominal(wl.team, usage):
            rest = itertools.chain([entry], rest)
            break
        take(entry, "priority")
    _evict_in_batches(state, wl, usage, contested, others, within, take, "reclaim")
    if not within():
        _evict_in_batches(state, wl, usage, contested, list(rest), within, take, "priority")
    if not within() or not any(v.reason == "reclaim" for v in chosen):
        for victim in chosen:
            state.restore(victim.entry)
        return None
    found = _minimise(
        state, chosen, lambda: _may_fit(state, wl.team, usage, contested, {}) and within()
    )
    if not any(v.reason == "reclaim" for v in found):
        for victim in found:  # its own work alone makes room: the caller's search decides
            state.restore(victim.entry)
        return None
    return found


def contested_pairs(state: CycleState, team: str, usage: dict[FR, int]) -> set[FR]:
    """The pairs a preemption search for ``usage`` counts victims on (see :func:`_short`)."""
    return _short(state, team, usage)


def _short(state: CycleState, team: str, usage: dict[FR, int]) -> set[FR]:
    """The (flavor, resource) pairs the request is short of; only victims using them help.

    When nothing is short in total (the nodes are fragmented), every requested pair counts.
    """
    tree = state.tree
    short = set()
    for fr, value in usage.items():
        if value <= 0:
            continue
        room = _node_room(state, fr)
        if fr in state.model.governed:
            room = min(room, tree.available(team, fr))
        if room < value:
            short.add(fr)
    return short or {fr for fr, v in usage.items() if v > 0}


def _node_room(state: CycleState, fr: FR) -> float:
    """Free node room for ``fr`` on its flavor; unbounded for a resource no node offers
    (counted in quota only: a quota group's, a resource transformation's output), which no
    node is asked for, so evicting work never has to free it on nodes."""
    if fr[1] not in state.fit.resources:
        return math.inf
    return state.fit.flavor_free(fr)


def _hopeless(
    state: CycleState, wl: Workload, usage: dict[FR, int], contested: set[FR], lenders: list[str]
) -> bool:
    """Team-level bound, before looking at workloads: evicting everything that could be
    evicted (the team's own work, and all work of the lending teams) frees too little."""
    tree = state.tree
    own_ok = state.model.teams[wl.team].preempt_team_tasks != PreemptTeamTasks.NEVER
    for fr in contested:
        own_gain = _held(state, wl.team, fr) if own_ok else 0
        others_gain = sum(_held(state, team, fr) for team in lenders)
        room = _node_room(state, fr) + own_gain + others_gain
        if fr in state.model.governed:
            quota_room = min(tree.available(wl.team, fr) + others_gain, state.ceiling(wl.team, fr))
            room = min(room, int(quota_room) + own_gain)
        if room < usage[fr]:
            return True
    return False


def _held(state: CycleState, team: str, fr: FR) -> int:
    """What a team's admitted work holds of ``fr``: its quota usage for a governed pair; for
    a resource no quota governs (CPU beside a GPU-only quota) the sum over its workloads,
    which the tree does not track but whose eviction frees node room all the same."""
    if fr in state.model.governed:
        return state.tree.usage(team, fr)
    return sum(e.usage.get(fr, 0) for e in state.entries(team, {fr[0]}) if not e.removed)


def _could_fit_without(
    state: CycleState, team: str, usage: dict[FR, int], candidates: list[Admitted]
) -> bool:
    """A necessary condition: would the request fit if every candidate were evicted?

    Evicting a workload frees at most its own usage, so if even the sum of all candidates'
    usage cannot cover the shortfall, no search can succeed.
    """
    freed: dict[FR, int] = {}
    for entry in candidates:
        for fr, value in entry.usage.items():
            freed[fr] = freed.get(fr, 0) + value
    tree = state.tree
    for fr, value in usage.items():
        if value <= 0:
            continue
        room = _node_room(state, fr) + freed.get(fr, 0)
        if fr in state.model.governed:
            room = min(room, tree.available(team, fr) + freed.get(fr, 0))
        if room < value:
            return False
    return True


def _evict_in_batches(
    state: CycleState,
    wl: Workload,
    usage: dict[FR, int],
    contested: set[FR],
    candidates: Sequence[Admitted],
    fits: Fits,
    take: Callable[[Admitted, PreemptionReason], None],
    reason: PreemptionReason,
) -> None:
    """Evict candidates in order, choosing on paper and evicting a batch once it could make
    room, until the preemptor fits.

    ``priority`` takes the team's own lower-priority work (which also lifts its borrowing
    ceiling); the reclaim reasons take other teams' work only while that team still
    borrows what is contested, counting the batch chosen so far as gone.
    """
    tree = state.tree
    own = reason == "priority"
    removed: dict[str, dict[FR, int]] = {}
    freed: dict[FR, int] = {}
    batch: list[Admitted] = []
    for entry in candidates:
        team = entry.workload.team
        gone = removed.setdefault(team, {})
        if not own and not tree.borrows(team, contested & entry.usage.keys(), gone):
            continue  # that team no longer borrows what is contested
        batch.append(entry)
        for fr, v in entry.usage.items():
            gone[fr] = gone.get(fr, 0) + v
            freed[fr] = freed.get(fr, 0) + v
        if _may_fit(state, wl.team, usage, contested, freed, own=own):
            for victim in batch:
                take(victim, reason)
            batch.clear()
            removed.clear()
            freed.clear()
            if fits():
                return


def _minimise(state: CycleState, chosen: list[Victim], fits: Fits) -> list[Victim]:
    """Put victims back, newest choice first, while the preemptor still fits."""
    if len(chosen) == 1:
        return chosen  # it was needed: the preemptor did not fit before
    needed: list[Victim] = []
    for victim in reversed(chosen):
        state.restore(victim.entry)
        if fits():
            continue
        state.remove(victim.entry)
        needed.append(victim)
    needed.reverse()
    return needed


def _fair_share(
    state: CycleState,
    wl: Workload,
    usage: dict[FR, int],
    contested: set[FR],
    candidates: Sequence[Admitted],
    fits: Fits,
    take: Callable[[Admitted, PreemptionReason], None],
    pairs: FairPairs,
) -> None:
    """Preempt across teams by dominant resource share, with Kueue's two strategies, the
    shares compared where the teams' paths meet (``fair_pairs.py``).

    Victims are first chosen on paper (shares computed with the chosen victims' usage taken
    off); they are evicted from the working state only once, together, they free enough to
    possibly make room — most hopeless searches then cost no state changes at all.
    """
    teams = {entry.workload.team for entry in candidates}
    current = {team: pairs.target_share(team, {}) for team in teams}
    if all(current[team] < pairs.preemptor_after(team) for team in teams):
        return  # no strategy lets anyone with a smaller share be preempted
    tree = state.tree
    removed: dict[str, dict[FR, int]] = {}
    chosen: list[Admitted] = []

    def borrowing(team: str, frs: set[FR]) -> bool:
        return tree.borrows(team, frs, removed.get(team))

    freed: dict[FR, int] = {}  # what the chosen victims use, all teams together
    fitted: list[bool] = []  # fits() in the current state (it changes only when victims go)

    def settled() -> bool:
        if chosen:
            if not _may_fit(state, wl.team, usage, contested, freed):
                return False
            for entry in chosen:
                take(entry, "fair-share")
            chosen.clear()
            removed.clear()
            freed.clear()
            fitted.clear()
        if not fitted:
            fitted.append(fits())
        return fitted[0]

    picked: list[Admitted] = []  # every victim chosen in this search, taken or not
    remaining = list(candidates)
    ranks: dict[str, tuple[float, ...]] = {}  # as ``removed`` stands; cleared when it changes
    for strategy in ("final-share", "initial-share"):
        by_team: dict[str, list[Admitted]] = {}
        for entry in remaining:
            by_team.setdefault(entry.workload.team, []).append(entry)
        ranks.clear()
        while by_team and not settled():
            if not ranks:
                ranks.update(pairs.ranks(by_team, removed, current))
            # the largest share first; a tie goes to the team whose candidate comes first
            # (candidate order: priority, then admission), never to a team's name
            team = max(by_team, key=ranks.__getitem__)
            entry = by_team[team].pop(0)
            if not by_team[team]:
                del by_team[team]
            if not borrowing(team, contested & entry.usage.keys()):
                continue
            if _would_reclaim_back(state, wl, entry, removed.get(team, {}), picked):
                continue
            flat = pairs.flat(team)
            before = current[team] if flat else pairs.target_share(team, removed)
            after = pairs.target_share(team, removed, entry.usage)
            preemptor_after = pairs.preemptor_after(team)
            allowed = (
                preemptor_after <= after if strategy == "final-share" else preemptor_after < before
            )
            if allowed:
                gone = removed.setdefault(team, {})
                for fr, v in entry.usage.items():
                    gone[fr] = gone.get(fr, 0) + v
                    freed[fr] = freed.get(fr, 0) + v
                chosen.append(entry)
                picked.append(entry)
                remaining.remove(entry)
                current[team] = after
                ranks.clear()
            else:
                by_team.pop(team, None)
        if settled():
            return


def _would_reclaim_back(
    state: CycleState,
    wl: Workload,
    entry: Admitted,
    gone: dict[FR, int],
    picked: Sequence[Admitted] = (),
) -> bool:
    """Would evicting ``entry`` take its team below its own quota while it has work waiting
    that fits there and may reclaim from ``wl``? Then the preemptor would borrow quota its
    owner takes straight back, and the two would preempt each other for ever. The team's
    victims already ``picked`` in this search wait too once evicted: one that fits the room
    counts (chosen while the team still borrowed, it would be back within quota)."""
    team = entry.workload.team
    rule = state.model.teams[team].reclaim
    if rule == ReclaimPolicy.NEVER:
        return False
    above = wl.priority if rule == ReclaimPolicy.LOWER_PRIORITY else None
    tree = state.tree
    for fr, value in entry.usage.items():
        if fr not in state.model.governed:
            continue
        room = tree.quota(team, fr) - (tree.usage(team, fr) - gone.get(fr, 0) - value)
        if room <= 0:
            continue
        if state.waiting_within(team, fr[1], room, above):
            return True
        for victim in picked:
            asked = victim.usage.get(fr, 0)
            may = above is None or victim.workload.priority > above
            if victim.workload.team == team and 0 < asked <= room and may:
                return True
    return False


def _may_fit(
    state: CycleState,
    team: str,
    usage: dict[FR, int],
    short: set[FR],
    freed: dict[FR, int],
    own: bool = False,
) -> bool:
    """Could the request fit once ``freed`` usage is gone (the team's own when ``own``, which
    also lifts its borrowing ceiling)? A necessary condition only."""
    tree = state.tree
    for fr in short:
        gain = freed.get(fr, 0)
        room = _node_room(state, fr) + gain
        if fr in state.model.governed:
            ceiling = state.ceiling(team, fr) + (gain if own else 0)
            quota_room = min(tree.available(team, fr) + gain, ceiling)
            room = min(room, int(quota_room))
        if room < usage[fr]:
            return False
    return True
