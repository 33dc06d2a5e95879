"""Flavor options: where a workload may run, and its quota standing there.

A workload runs with one node flavor for all its pod sets. Its *eligible* flavors are those
whose Ready, schedulable nodes admit every pod set (labels, taints), its team's own flavors
first; none is eligible when it requests a resource its team does not cover
(:meth:`TeamRules.unavailable <fleetshare.governance.quota.TeamRules.unavailable>`). Requests for
the team's quota-only resources are charged to their own flavor, not the node flavor. On each
flavor, an :class:`Option` says whether it is within the team's quota, borrowing, or short.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetshare.governance.queues import QueueKey, Shape
from fleetshare.governance.quota import FR, QuotaModel
from fleetshare.governance.state import CycleState, usage_of
from fleetshare.model.workload import Workload

WITHIN, BORROWING, SHORT = 0, 1, 2
"""Quota standings of an option: within the team's quota now, borrowing, short of quota."""


@dataclass(slots=True)
class Option:
    """One way to run a workload: a flavor per pod set, and its quota standing."""

    flavors: tuple[str, ...]
    usage: dict[FR, int]
    mode: int
    """``WITHIN``, ``BORROWING`` or ``SHORT``."""
    problem: str | None
    """Why it is short of quota (None unless ``SHORT``)."""
    within: bool
    """Within the team's own quota (whether or not that quota is lent out now)."""


class Flavors:
    """Eligible flavors and options of one cycle's pending workloads (cached per shape)."""

    def __init__(
        self,
        model: QuotaModel,
        state: CycleState,
        of: dict[int, tuple[Shape, QueueKey, Workload]],
    ) -> None:
        self._model = model
        self._state = state
        self._of = of
        self._cache: dict[int, tuple[str, ...]] = state.memo.setdefault("flavors", {})
        """Shared by the cycles over the same nodes."""

    def eligible(self, wl: Workload) -> tuple[str, ...]:
        """Flavors that can hold every pod set, the team's own flavors first."""
        shape = self._of[id(wl)][0].uid
        found = self._cache.get(shape)
        if found is None:
            rules = self._model.teams[wl.team]
            if rules.unavailable(wl) is not None:
                self._cache[shape] = ()
                return ()
            with_nodes = self._state.flavors_with_nodes
            order = [f for f in rules.flavor_order if f in with_nodes]
            order += sorted(with_nodes - set(order))
            fit = self._state.fit
            found = tuple(f for f in order if all(len(fit.eligible(f, ps)) for ps in wl.podsets))
            self._cache[shape] = found
        return found

    def usage(self, wl: Workload, flavor: str) -> dict[FR, int]:
        """What ``wl`` asks for with every pod set on ``flavor`` (the same dictionary for a
        shape: never changed by its users)."""
        usages = self._of[id(wl)][0].usages
        found = usages.get(flavor)
        if found is None:
            charged = self._model.teams[wl.team].charged
            found = usages[flavor] = usage_of(wl, (flavor,) * len(wl.podsets), charged)
        return found

    def option(self, wl: Workload, flavor: str) -> Option:
        """One flavor for all pod sets, with its quota standing now."""
        usage = self.usage(wl, flavor)
        problem = self._state.quota_problem(wl.team, usage)
        within = self._state.within_nominal(wl.team, usage)
        mode = SHORT if problem is not None else WITHIN if within else BORROWING
        return Option((flavor,) * len(wl.podsets), usage, mode, problem, within)

    def none_eligible(self, wl: Workload) -> str:
        """Why no flavor is eligible."""
        unavailable = self._model.teams[wl.team].unavailable(wl)
        if unavailable is not None:
            return unavailable
        selectors = {k: v for ps in wl.podsets for k, v in ps.node_selector.items()}
        if not self._state.flavors_with_nodes:
            return "no Ready, schedulable nodes in the cluster"
        wanted = f" matching {selectors}" if selectors else ""
        return f"no Ready, schedulable node{wanted} admits every pod set (labels, taints)"
