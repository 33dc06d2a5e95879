"""Work tried before room was freed: what it may preempt waits for it, and the room a team
freed goes to it first (pure).

A cycle tries each pending workload once, in merge order. When an admission preempts, the
room and quota its victims held are free again, and work tried *before* may fit now: in the
next cycle at the same instant it would take them back from whatever was admitted into them
meanwhile, which is work started only to be preempted. So:

* After an eviction a workload waits for the next cycle when a workload that failed before
  the eviction may preempt it (:meth:`FailedAhead.deferral`):

  - work of its own team that may preempt it (:meth:`~fleetshare.governance.ordering.
    MergeKeys.may_preempt`: a higher priority, or with ``LowerOrNewerEqualPriority`` an older
    one of the same priority), or
  - when it must borrow, another team's work within that team's quota, which takes lent
    quota back (reclaim ``Any``; ``LowerPriority``: when it has the higher priority): a
    team whose quota it would borrow (:attr:`~fleetshare.governance.quota.QuotaModel.
    lenders`; not one of another root cohort, which shares nothing with it).

  Work preempted in the cycle counts as failed before the eviction, within its quota: it is
  pending again in the next cycle, and goes first there.

* The preemptor itself: when its victims are out and work of its own team, tried before it
  in the cycle, that may preempt it fits in the room they left, that work is admitted
  instead, and the preemptor stays pending (:meth:`FailedAhead.preempting`). Kueue gets the
  same outcome: its preemptor is not admitted in the cycle that evicts, and once the victims
  are gone the queue's head, the better-ranked work, takes the room.

That earlier work comes first again in the next cycle's merge order, so waiting costs one
cycle at the same instant. Kueue gets there a cycle later: it requeues inadmissible work
when admitted work is evicted, after the lower-ranked work took the room.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleetshare.governance.ordering import MergeKeys
from fleetshare.governance.quota import QuotaModel
from fleetshare.model.reason import PendingReason
from fleetshare.model.workload import Workload
from fleetshare.policy.schema import ReclaimPolicy


def _rank(wl: Workload) -> tuple[int, float]:
    return (-wl.priority, wl.submit_time)


@dataclass(slots=True)
class _Failures:
    """One team's failures in one part of the cycle (before or since its latest eviction)."""

    work: list[Workload] = field(default_factory=list)
    """In the order they failed."""
    within: list[Workload] = field(default_factory=list)
    """Those of ``work`` that fitted their team's quota when tried."""
    best: Workload | None = None
    """The best-ranked of ``work``."""
    highest_within: int | None = None
    """The highest priority among ``within``."""
    highest_victim: int | None = None
    """The highest priority of the team's work preempted in the cycle."""

    def add(self, wl: Workload, within: bool) -> None:
        self.work.append(wl)
        if self.best is None or _rank(wl) < _rank(self.best):
            self.best = wl
        if within:
            self.within.append(wl)
            if self.highest_within is None or wl.priority > self.highest_within:
                self.highest_within = wl.priority

    def merge(self, other: _Failures) -> None:
        self.work += other.work
        self.within += other.within
        if other.best is not None and (self.best is None or _rank(other.best) < _rank(self.best)):
            self.best = other.best
        if other.highest_within is not None and (
            self.highest_within is None or other.highest_within > self.highest_within
        ):
            self.highest_within = other.highest_within
        assert other.highest_victim is None, "victims are counted before the latest eviction"

    def remove(self, wl: Workload) -> bool:
        """Forget ``wl`` (admitted after all); False if it is not here."""
        if not any(w is wl for w in self.work):
            return False
        self.work = [w for w in self.work if w is not wl]
        self.within = [w for w in self.within if w is not wl]
        self.best = min(self.work, key=_rank, default=None)
        self.highest_within = max((w.priority for w in self.within), default=None)
        return True


class FailedAhead:
    """The failures of one cycle, before and since its latest eviction."""

    def __init__(self, model: QuotaModel) -> None:
        self._model = model
        self._since: dict[str, _Failures] = {}
        """Per team, its failures since the latest eviction."""
        self._before: dict[str, _Failures] = {}
        """Per team, its failures before the latest eviction, and the work preempted in the
        cycle (counted as failed within its quota)."""
        self._victims: set[int] = set()
        """The work preempted in the cycle (by ``id``): not pending in this cycle."""

    def failed(self, wl: Workload, within: bool) -> None:
        """``wl`` stays pending; ``within``: it fitted its team's quota when tried."""
        self._since.setdefault(wl.team, _Failures()).add(wl, within)

    def evicted(self) -> None:
        """An admission preempted: every failure so far was before room was freed."""
        for team, since in self._since.items():
            self._before.setdefault(team, _Failures()).merge(since)
        self._since.clear()

    def victim(self, wl: Workload) -> None:
        """``wl`` was preempted in this cycle: it is pending again in the next one, and goes
        first there (it may take back its team's quota, or preempt its team's lower-ranked
        work)."""
        failures = self._before.setdefault(wl.team, _Failures())
        failures.add(wl, False)
        if failures.highest_victim is None or wl.priority > failures.highest_victim:
            failures.highest_victim = wl.priority
        self._victims.add(id(wl))

    def taken(self, wl: Workload) -> None:
        """``wl``, which failed earlier in the cycle, was admitted after all."""
        for part in (self._since, self._before):
            failures = part.get(wl.team)
            if failures is not None and failures.remove(wl):
                return

    def preempting(self, wl: Workload, keys: MergeKeys) -> list[Workload]:
        """The work of ``wl``'s team that failed earlier in the cycle and may preempt ``wl``,
        best-ranked first: the room ``wl``'s victims leave goes to the first of them that fits
        in it (module docstring)."""
        out = [
            other
            for part in (self._before, self._since)
            for other in (part[wl.team].work if wl.team in part else ())
            if id(other) not in self._victims and keys.may_preempt(other, wl)
        ]
        return sorted(out, key=_rank)

    def deferral(self, wl: Workload, keys: MergeKeys) -> PendingReason | None:
        """Why ``wl`` waits for the next cycle (a ``queued`` reason, keyed by the team it
        waits for, not by the workload ahead), or None if it is tried now."""
        if not self._before:
            return None
        failures = self._before.get(wl.team)
        ahead = failures.best if failures is not None else None
        if ahead is not None and keys.may_preempt(ahead, wl):
            return PendingReason(
                f"waits for {ahead.name}, ahead of it in {wl.team}'s queue: room was freed in "
                f"this cycle after {ahead.name} was tried",
                "queued",
                ("ahead-tried", wl.team),
            )
        if not keys.prefix(wl)[0]:
            return None
        lenders = self._model.lenders.get(wl.team, frozenset())
        for team, failures in sorted(self._before.items()):
            rules = self._model.teams.get(team)
            if team not in lenders or rules is None or rules.reclaim == ReclaimPolicy.NEVER:
                continue  # only a team whose quota this would borrow may take it back
            tried, preempted = failures.highest_within, failures.highest_victim
            if rules.reclaim == ReclaimPolicy.LOWER_PRIORITY:
                tried = tried if tried is not None and tried > wl.priority else None
                preempted = preempted if preempted is not None and preempted > wl.priority else None
            if tried is not None:
                return PendingReason(
                    f"waits: room was freed in this cycle after work of {team} within its "
                    f"quota was tried, and {team} may take back the quota this would borrow",
                    "queued",
                    ("reclaimable-by", team),
                )
            if preempted is not None:
                return PendingReason(
                    f"waits: work of {team} was preempted in this cycle; it is tried first "
                    "in the next cycle at this instant",
                    "queued",
                    ("preempted-work-of", team),
                )
        return None
