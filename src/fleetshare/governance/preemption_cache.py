"""Remember preemption searches that failed earlier in the same cycle.

Within a cycle, a preemption search for a workload fails for good if every one of these is at
least as hard for a later workload of the same team on the same flavors: a priority no higher
(fewer candidates), as many or more pods per pod set, and per-pod requests at least as large
(less room, a larger share after admission). The cache forgets a flavor when something makes
room there (a preemption) or makes new victims possible there (a team starts borrowing).
"""

from __future__ import annotations

from fleetshare.model.workload import Workload


class Attempt:
    """What a preemption search for a workload depends on: priority and pod sets."""

    __slots__ = ("_hash", "pods", "priority", "requests")

    def __init__(self, priority: int, pods: tuple[tuple[int, tuple[tuple[str, int], ...]], ...]):
        self.priority = priority
        self.pods = pods
        self.requests = [dict(requests) for _, requests in pods]
        self._hash = hash((priority, pods))

    @staticmethod
    def of(wl: Workload) -> Attempt:
        pods = tuple((ps.count, tuple(ps.requests.items())) for ps in wl.podsets)
        return Attempt(wl.priority, pods)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Attempt)
            and self.priority == other.priority
            and self.pods == other.pods
        )

    def no_easier_than(self, failed: Attempt) -> bool:
        if self.priority > failed.priority or len(self.pods) != len(failed.pods):
            return False
        for (count, _), mine, (failed_count, failed_requests) in zip(
            self.pods, self.requests, failed.pods, strict=True
        ):
            if count < failed_count:
                return False
            if any(mine.get(name, 0) < amount for name, amount in failed_requests):
                return False
        return True


class FailedPreemptions:
    """Failed searches per (team, flavors)."""

    def __init__(self) -> None:
        # per (team, flavors): the failed attempts (each once), and answers given so far
        # (with how many failed attempts there were then)
        self._failed: dict[
            tuple[str, tuple[str, ...]], tuple[dict[Attempt, None], dict[Attempt, int]]
        ] = {}
        self._attempts: dict[int, tuple[Workload, Attempt]] = {}
        self.forgets = 0
        """How many times :meth:`forget` was called."""

    def _of(self, wl: Workload) -> Attempt:
        found = self._attempts.get(id(wl))
        if found is None or found[0] is not wl:
            found = self._attempts[id(wl)] = (wl, Attempt.of(wl))
        return found[1]

    def known_to_fail(
        self, wl: Workload, flavors: tuple[str, ...], attempt: Attempt | None = None
    ) -> bool:
        """True when an earlier failure implies this search fails too (``attempt``: the
        workload's, if the caller has it)."""
        found = self._failed.get((wl.team, flavors))
        if found is None:
            return False
        failed, answers = found
        if attempt is None:
            attempt = self._of(wl)
        seen = answers.get(attempt)  # -1: known to fail; n: not implied by the first n
        if seen is not None and (seen < 0 or seen == len(failed)):
            return seen < 0
        known = attempt in failed or any(attempt.no_easier_than(f) for f in failed)
        answers[attempt] = -1 if known else len(failed)
        return known

    def record(
        self, wl: Workload, flavors: tuple[str, ...], attempt: Attempt | None = None
    ) -> None:
        """Remember a failed search."""
        failed, _ = self._failed.setdefault((wl.team, flavors), ({}, {}))
        failed[self._of(wl) if attempt is None else attempt] = None

    def forget(self, flavors: set[str]) -> None:
        """Drop what was learnt about searches on any of ``flavors``."""
        self.forgets += 1
        for key in [k for k in self._failed if flavors.intersection(k[1])]:
            del self._failed[key]
