"""Work tried before room was freed: what it may preempt waits for it (pure).

A cycle tries each pending workload once, in merge order. When an admission preempts, the
room and quota its victims held are free again, and work tried *before* may fit now: in the
next cycle at the same instant it would take them back from whatever was admitted into them
meanwhile, which is work started only to be preempted. So after an eviction a workload waits
for the next cycle when a workload that failed before the eviction may preempt it:

* work of its own team that may preempt it (:meth:`~fleetshare.governance.ordering.MergeKeys.
  may_preempt`: a higher priority, or with ``LowerOrNewerEqualPriority`` an older one of the
  same priority), or
* when it must borrow, another team's work within that team's quota, which takes lent quota
  back (reclaim ``Any``; ``LowerPriority``: when it has the higher priority).

Work preempted in the cycle counts as failed before the eviction: it is pending again in the
next cycle, where it may take its team's quota back.

That earlier work comes first again in the next cycle's merge order, so waiting costs one
cycle at the same instant. Kueue gets there a cycle later: it requeues inadmissible work
when admitted work is evicted, after the lower-ranked work took the room.
"""

from __future__ import annotations

from fleetshare.governance.ordering import MergeKeys
from fleetshare.governance.quota import QuotaModel
from fleetshare.model.workload import Workload
from fleetshare.policy.schema import ReclaimPolicy


def _rank(wl: Workload) -> tuple[int, float]:
    return (-wl.priority, wl.submit_time)


class FailedAhead:
    """The failures of one cycle, before and since its latest eviction."""

    def __init__(self, model: QuotaModel) -> None:
        self._model = model
        self._since: dict[str, Workload] = {}
        """Per team, its best-ranked failure since the latest eviction."""
        self._since_within: dict[str, int] = {}
        """Per team, the highest priority of its failed work within quota since then."""
        self._before: dict[str, Workload] = {}
        self._before_within: dict[str, int] = {}
        """The same, for failures before the latest eviction."""

    def failed(self, wl: Workload, within: bool) -> None:
        """``wl`` stays pending; ``within``: it fitted its team's quota when tried."""
        best = self._since.get(wl.team)
        if best is None or _rank(wl) < _rank(best):
            self._since[wl.team] = wl
        if within:
            self._since_within[wl.team] = max(wl.priority, self._since_within.get(wl.team, 0))

    def evicted(self) -> None:
        """An admission preempted: every failure so far was before room was freed."""
        for team, wl in self._since.items():
            best = self._before.get(team)
            if best is None or _rank(wl) < _rank(best):
                self._before[team] = wl
        for team, priority in self._since_within.items():
            self._before_within[team] = max(priority, self._before_within.get(team, priority))
        self._since.clear()
        self._since_within.clear()

    def victim(self, wl: Workload) -> None:
        """``wl`` was preempted in this cycle: it is pending again in the next one, where it
        may take back its team's quota (or preempt its team's lower-ranked work)."""
        best = self._before.get(wl.team)
        if best is None or _rank(wl) < _rank(best):
            self._before[wl.team] = wl
        self._before_within[wl.team] = max(wl.priority, self._before_within.get(wl.team, 0))

    def deferral(self, wl: Workload, keys: MergeKeys) -> str | None:
        """Why ``wl`` waits for the next cycle, or None if it is tried now."""
        if not self._before:
            return None
        ahead = self._before.get(wl.team)
        if ahead is not None and keys.may_preempt(ahead, wl):
            return (
                f"waits for {ahead.name}, ahead of it in {wl.team}'s queue: room was freed in "
                f"this cycle after {ahead.name} was tried"
            )
        if not self._before_within or not keys.prefix(wl)[0]:
            return None
        for team, priority in sorted(self._before_within.items()):
            rules = self._model.teams.get(team)
            if team == wl.team or rules is None or rules.reclaim == ReclaimPolicy.NEVER:
                continue
            if rules.reclaim == ReclaimPolicy.LOWER_PRIORITY and wl.priority >= priority:
                continue
            return (
                f"waits: room was freed in this cycle after work of {team} within its quota "
                f"was tried, and {team} may take back the quota this would borrow"
            )
        return None
