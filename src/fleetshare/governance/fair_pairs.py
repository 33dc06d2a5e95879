"""The shares fair-sharing preemption compares, with cohorts nested.

Kueue compares a preemptor's and a target's shares not at their ClusterQueues but at their
*almost least common ancestors*: the two nodes just below where their paths up the cohort tree
meet (``pkg/scheduler/preemption/fairsharing``): the preemptor's node with the preemptor's
usage added, the target's before and after the candidate's eviction. Teams in one group compare
their own shares (the flat case, :meth:`FairPairs.flat`, computed from the team's usage
alone); otherwise the groups' shares are computed with the usage changes applied to the quota
tree and taken back (``CycleState.shares_with``). Targets are taken from the team whose nodes,
from the top, have the highest shares (Kueue walks down from the root cohort to the child
with the highest share).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fleetshare.governance.quota import FR
from fleetshare.governance.state import CycleState
from fleetshare.model.workload import Workload

Removed = Mapping[str, Mapping[FR, int]]
"""Per team, the usage of the victims chosen so far (taken off)."""


class FairPairs:
    """A preemptor's fair-share comparisons against each target team."""

    def __init__(self, state: CycleState, wl: Workload, usage: Mapping[FR, int]) -> None:
        self._state = state
        self._team = wl.team
        self._usage = usage
        self._pairs: dict[str, tuple[str, str]] = {}
        self._after: dict[str, float] = {}

    def pair(self, target: str) -> tuple[str, str]:
        """The preemptor's and the target's nodes whose shares are compared."""
        found = self._pairs.get(target)
        if found is None:
            found = self._pairs[target] = self._state.model.below_common(self._team, target)
        return found

    def flat(self, target: str) -> bool:
        """Do the two teams compare their own shares (their paths meet right above them)?"""
        return self.pair(target) == (self._team, target)

    def preemptor_after(self, target: str) -> float:
        """The preemptor's node's share with the preemptor admitted."""
        node = self.pair(target)[0]
        found = self._after.get(node)
        if found is None:
            state = self._state
            if node == self._team:
                found = state.dominant_share(node, self._usage)
            else:
                found = state.shares_with({self._team: self._usage}, [node])[node]
            self._after[node] = found
        return found

    def target_share(self, target: str, removed: Removed, extra: Mapping[FR, int] = {}) -> float:
        """The target's node's share with the victims in ``removed`` (and ``extra``, of the
        target's) evicted."""
        node = self.pair(target)[1]
        state = self._state
        if node == target:
            gone = dict(removed.get(target, {}))
            for fr, value in extra.items():
                gone[fr] = gone.get(fr, 0) + value
            return state.dominant_share(target, {fr: -v for fr, v in gone.items()} or None)
        changes = {team: dict(usage) for team, usage in removed.items()}
        mine = changes.setdefault(target, {})
        for fr, value in extra.items():
            mine[fr] = mine.get(fr, 0) + value
        negated = {team: {fr: -v for fr, v in usage.items()} for team, usage in changes.items()}
        return state.shares_with(negated, [node])[node]

    def ranks(
        self, targets: Iterable[str], removed: Removed, current: Mapping[str, float]
    ) -> dict[str, tuple[float, ...]]:
        """Where each target team's work stands as a preemption target, from the top: the
        shares of its groups that order work, then its own (``current[target]``, when the
        pair is flat and its path has no group). The victims in ``removed`` are taken off
        the quota tree once for all the targets."""
        model = self._state.model
        found: dict[str, tuple[float, ...]] = {}
        paths: dict[str, tuple[str, ...]] = {}
        for target in targets:
            path = model.fair_paths.get(target, (target,))
            if len(path) == 1 and self.flat(target):
                found[target] = (current[target],)
            else:
                paths[target] = path
        if paths:
            nodes = sorted({node for path in paths.values() for node in path})
            negated = {team: {fr: -v for fr, v in usage.items()} for team, usage in removed.items()}
            shares = self._state.shares_with(negated, nodes)
            for target, path in paths.items():
                found[target] = tuple(shares[node] for node in path)
        return found
