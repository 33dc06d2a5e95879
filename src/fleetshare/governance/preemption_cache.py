"""Remember preemption searches that failed earlier in the same cycle.

Within a cycle, a preemption search for a workload fails for good if every one of these is at
least as hard for a later workload of the same team on the same flavors: a priority no higher
(fewer candidates), as many or more pods per pod set, and per-pod requests at least as large
(less room, a larger share after admission). The cache forgets a flavor when something makes
room there (a preemption) or makes new victims possible there (a team starts borrowing).
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetshare.model.workload import Workload


@dataclass(frozen=True, slots=True)
class _Attempt:
    priority: int
    pods: tuple[tuple[int, tuple[tuple[str, int], ...]], ...]

    @staticmethod
    def of(wl: Workload) -> _Attempt:
        pods = tuple((ps.count, tuple(ps.requests.items())) for ps in wl.podsets)
        return _Attempt(wl.priority, pods)

    def no_easier_than(self, failed: _Attempt) -> bool:
        if self.priority > failed.priority or len(self.pods) != len(failed.pods):
            return False
        for (count, requests), (failed_count, failed_requests) in zip(
            self.pods, failed.pods, strict=True
        ):
            if count < failed_count:
                return False
            mine = dict(requests)
            if any(mine.get(name, 0) < amount for name, amount in failed_requests):
                return False
        return True


class FailedPreemptions:
    """Failed searches per (team, flavors)."""

    def __init__(self) -> None:
        self._failed: dict[tuple[str, tuple[str, ...]], list[_Attempt]] = {}

    def known_to_fail(self, wl: Workload, flavors: tuple[str, ...]) -> bool:
        """True when an earlier failure implies this search fails too."""
        attempt = _Attempt.of(wl)
        return any(attempt.no_easier_than(f) for f in self._failed.get((wl.team, flavors), ()))

    def record(self, wl: Workload, flavors: tuple[str, ...]) -> None:
        """Remember a failed search."""
        self._failed.setdefault((wl.team, flavors), []).append(_Attempt.of(wl))

    def forget(self, flavors: set[str]) -> None:
        """Drop what was learnt about searches on any of ``flavors``."""
        for key in [k for k in self._failed if flavors.intersection(k[1])]:
            del self._failed[key]
