"""Choosing preemption victims: never more than needed, never in a loop.

Three reasons to preempt, as in Kueue and HyperPod:

- **reclaim** — a team wants work within its own quota, which is lent out: borrowers are
  preempted (lowest priority, most recently admitted first) while they still borrow.
- **priority** — within a team, higher-priority work preempts lower (PreemptTeamTasks).
- **fair-share** — with fair sharing on, a team that borrows less (weighted dominant resource
  share) may preempt borrowed work of a team that borrows more, but only while the preemptor's
  share after stays at or below the target's share after (or below its share before): the
  target can never preempt straight back, so there is no ping-pong.

Victims are removed greedily until the preemptor fits, then the set is minimised: each victim
is put back, newest choice first, if the preemptor still fits without evicting it. Work younger
than the configured minimum runtime (or reclaim grace) is never a victim, nor is work admitted
in the same cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fleetshare.governance.quota import FR
from fleetshare.governance.snapshot import PreemptionReason
from fleetshare.governance.state import Admitted, CycleState
from fleetshare.model.workload import Workload
from fleetshare.policy.schema import PreemptTeamTasks, ReclaimPolicy


@dataclass(frozen=True, slots=True)
class Victim:
    """A workload to evict, and why."""

    entry: Admitted
    reason: PreemptionReason


def _order(entries: list[Admitted]) -> list[Admitted]:
    """Lowest priority first, then most recently admitted first."""
    return sorted(entries, key=lambda e: (e.workload.priority, -e.admitted_at, e.workload.name))


def _old_enough(entry: Admitted, now: float, minimum: float) -> bool:
    return not entry.this_cycle and now - entry.admitted_at >= minimum


def _own_candidates(state: CycleState, wl: Workload, contested: set[FR]) -> list[Admitted]:
    rule = state.model.teams[wl.team].preempt_team_tasks
    if rule == PreemptTeamTasks.NEVER:
        return []
    minimum = state.cluster.preemption.min_runtime_seconds
    out = []
    for entry in state.admitted.values():
        other = entry.workload
        if entry.removed or other.team != wl.team or not contested & entry.usage.keys():
            continue
        lower = other.priority < wl.priority
        newer_equal = (
            rule == PreemptTeamTasks.LOWER_OR_NEWER_EQUAL_PRIORITY
            and other.priority == wl.priority
            and other.submit_time > wl.submit_time
        )
        if (lower or newer_equal) and _old_enough(entry, state.now, minimum):
            out.append(entry)
    return _order(out)


def _borrowing(state: CycleState, team: str, frs: set[FR]) -> bool:
    return any(state.tree.borrowed(team, fr) > 0 for fr in frs)


def _other_candidates(
    state: CycleState, wl: Workload, contested: set[FR], minimum: float
) -> list[Admitted]:
    rule = state.model.teams[wl.team].reclaim
    if rule == ReclaimPolicy.NEVER:
        return []
    out = []
    for entry in state.admitted.values():
        other = entry.workload
        if entry.removed or other.team == wl.team or other.team not in state.model.teams:
            continue
        shared = contested & entry.usage.keys()
        if not shared or not _borrowing(state, other.team, shared):
            continue
        if rule == ReclaimPolicy.LOWER_PRIORITY and other.priority >= wl.priority:
            continue
        if _old_enough(entry, state.now, minimum):
            out.append(entry)
    return _order(out)


Fits = Callable[[], bool]


def find_victims(
    state: CycleState, wl: Workload, usage: dict[FR, int], fits: Fits
) -> list[Victim] | None:
    """Victims that let ``wl`` (requesting ``usage``) fit, or None; state is left unchanged."""
    contested = {fr for fr, v in usage.items() if v > 0}
    reclaiming = state.within_nominal(wl.team, usage)
    settings = state.cluster.preemption
    chosen: list[Victim] = []

    def take(entry: Admitted, reason: PreemptionReason) -> None:
        state.remove(entry)
        chosen.append(Victim(entry, reason))

    if reclaiming:
        for entry in _other_candidates(state, wl, contested, settings.reclaim_grace_seconds):
            if fits():
                break
            if _borrowing(state, entry.workload.team, contested & entry.usage.keys()):
                take(entry, "reclaim")
    elif state.cluster.fair_share:
        others = _other_candidates(state, wl, contested, settings.min_runtime_seconds)
        _fair_share(state, wl, usage, contested, others, fits, take)
    if not fits():
        for entry in _own_candidates(state, wl, contested):
            take(entry, "priority")
            if fits():
                break
    if not fits():
        for victim in chosen:
            state.restore(victim.entry)
        return None
    return _minimise(state, chosen, fits)


def _minimise(state: CycleState, chosen: list[Victim], fits: Fits) -> list[Victim]:
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
) -> None:
    """Preempt across teams by dominant resource share, with Kueue's two strategies."""
    state.tree.add(wl.team, usage)
    preemptor_after = state.dominant_share(wl.team)
    state.tree.add(wl.team, usage, -1)
    remaining = list(candidates)
    for strategy in ("final-share", "initial-share"):
        by_team: dict[str, list[Admitted]] = {}
        for entry in remaining:
            by_team.setdefault(entry.workload.team, []).append(entry)
        while by_team and not fits():
            team = max(by_team, key=lambda t: (state.dominant_share(t), t))
            entry = by_team[team].pop(0)
            if not by_team[team]:
                del by_team[team]
            if not _borrowing(state, team, contested & entry.usage.keys()):
                continue
            before = state.dominant_share(team)
            state.remove(entry)
            after = state.dominant_share(team)
            allowed = (
                preemptor_after <= after if strategy == "final-share" else preemptor_after < before
            )
            if allowed:
                state.restore(entry)
                take(entry, "fair-share")
                remaining.remove(entry)
            else:
                state.restore(entry)
                by_team.pop(team, None)
        if fits():
            return
