"""Flavor options: where a workload may run, and its quota standing there.

Options are assignments of a node flavor to each pod set (Kueue assigns flavors per pod set).
A flavor *admits* a pod set when one of its Ready, schedulable nodes admits the pod set's pods
(labels, affinity, taints); the flavors are taken in the team's order, its own flavors first.
None is admissible when the workload requests a resource its team does not cover
(:meth:`TeamRules.unavailable <fleetshare.governance.quota.TeamRules.unavailable>`).

- *Uniform* options put every pod set on one flavor: one per flavor that admits every pod set
  (:meth:`Flavors.eligible`), in the team's order. They come first, so a workload whose pod
  sets all admit the same flavors keeps all of them on one flavor, as before pod sets could
  differ.
- When the pod sets are admitted by different flavors (a CPU driver selecting CPU nodes beside
  GPU workers selecting GPU nodes), one more option follows: the assignment Kueue's flavor
  assigner makes (:meth:`Flavors.assign`). Pod set by pod set, in order, the first admitting
  flavor whose quota can take the pod set on top of the pod sets assigned before it (within
  quota or by borrowing, ``whenCanBorrow: Borrow``; with ``TryNextFlavor`` one within quota
  first, then the first that borrows); when none can,
  the first on which it stays within the team's own quota (preemption could reclaim it: Kueue
  prefers such a flavor, ``whenCanPreempt: TryNextFlavor``), else its first admitting flavor.
  It is left out when it puts every pod set on one flavor (a uniform option already). When
  the nodes of a pod set's flavor had no room for it, the cycle asks for the assignment again
  with that flavor left out for that pod set (``avoid``; ``Cycle._place_elsewhere``).

Requests for the team's quota-only resources are charged to their own flavor, not the node
flavor. Each :class:`Option` says whether it is within the team's quota, borrowing, or short.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fleetshare.governance.queues import QueueKey, Shape
from fleetshare.governance.quota import FR, QuotaModel
from fleetshare.governance.state import CycleState, podset_usage, usage_of
from fleetshare.model.reason import PendingReason
from fleetshare.model.workload import PodSet, Workload

WITHIN, BORROWING, SHORT = 0, 1, 2
"""Quota standings of an option: within the team's quota now, borrowing, short of quota."""

Admits = tuple[tuple[str, ...], tuple[tuple[str, ...], ...] | None]
"""A shape's flavors: those admitting every pod set, and per pod set those admitting it (None
when every pod set is admitted by the same flavors)."""


@dataclass(slots=True)
class Option:
    """One way to run a workload: a flavor per pod set, and its quota standing."""

    flavors: tuple[str, ...]
    usage: dict[FR, int]
    mode: int
    """``WITHIN``, ``BORROWING`` or ``SHORT``."""
    problem: PendingReason | None
    """Why it is short of quota (None unless ``SHORT``; a ``quota`` reason)."""
    within: bool
    """Within the team's own quota (whether or not that quota is lent out now)."""


class Flavors:
    """Admissible flavors and options of one cycle's pending workloads (cached per shape)."""

    def __init__(
        self,
        model: QuotaModel,
        state: CycleState,
        of: dict[int, tuple[Shape, QueueKey, Workload]],
    ) -> None:
        self._model = model
        self._state = state
        self._of = of
        self._cache: dict[int, Admits] = state.memo.setdefault("flavors", {})
        """Shared by the cycles over the same nodes."""

    def _admits(self, wl: Workload) -> Admits:
        shape = self._of[id(wl)][0].uid
        found = self._cache.get(shape)
        if found is None:
            found = self._cache[shape] = self._compute(wl)
        return found

    def uniform(self, wl: Workload) -> tuple[str, ...]:
        """The flavors admitting every pod set of ``wl``, in the team's order."""
        return self._admits(wl)[0]

    def _compute(self, wl: Workload) -> Admits:
        rules = self._model.teams[wl.team]
        if rules.unavailable(wl) is not None:
            return (), None
        order = self._candidates(wl)
        fit = self._state.fit
        model = self._model
        podsets = wl.podsets

        def admits(flavor: str, ps: PodSet) -> bool:
            return len(fit.eligible(flavor, ps)) > 0 and model.topology_refusal(flavor, ps) is None

        if len(podsets) == 1:
            return tuple(f for f in order if admits(f, podsets[0])), None
        per = tuple(tuple(f for f in order if admits(f, ps)) for ps in podsets)
        uniform = tuple(f for f in per[0] if all(f in other for other in per[1:]))
        split = per if any(other != per[0] for other in per[1:]) else None
        return uniform, split

    def _candidates(self, wl: Workload) -> list[str]:
        """The flavors with nodes its team may use, in the order they are tried."""
        rules = self._model.teams[wl.team]
        with_nodes = self._state.flavors_with_nodes
        order = [f for f in rules.flavor_order if f in with_nodes]
        if not rules.flavors_listed:
            order += sorted(with_nodes - set(order))
        return order

    def forget(self, shapes: Iterable[int]) -> None:
        """Drop what is cached for ``shapes`` (uids of shapes that end with the cycle)."""
        for uid in shapes:
            self._cache.pop(uid, None)

    def admits(self, wl: Workload) -> Admits:
        """The flavors admitting every pod set, and per pod set those admitting it when they
        differ (None when not)."""
        return self._admits(wl)

    def eligible(self, wl: Workload) -> tuple[str, ...]:
        """Flavors that admit every pod set, the team's own flavors first."""
        return self._admits(wl)[0]

    def split(self, wl: Workload) -> tuple[tuple[str, ...], ...] | None:
        """Per pod set, the flavors admitting it, when they are not the same for every pod
        set (else None)."""
        return self._admits(wl)[1]

    def nominal_usage(self, wl: Workload) -> dict[FR, int] | None:
        """The usage whose quota standing orders the workload: with every pod set on the first
        flavor admitting them all whose quotas, all teams' together, could ever hold it (as
        Kueue's flavor assigner skips a flavor the cohort has too little quota of: its
        potential available), else on the first admitting flavor; else each pod set on its
        first admitting flavor (None: some pod set has none)."""
        uniform, split = self._admits(wl)
        if uniform:
            for flavor in uniform:
                usage = self.usage(wl, flavor)
                if self._could_ever_hold(usage):
                    return usage
            return self.usage(wl, uniform[0])
        if split is None or not all(split):
            return None
        return self.usage_on(wl, tuple(flavors[0] for flavors in split))

    def _could_ever_hold(self, usage: dict[FR, int]) -> bool:
        governed = self._model.governed
        pool = self._state.tree.lendable_pool
        return all(v <= pool(fr) for fr, v in usage.items() if v > 0 and fr in governed)

    def any_option(self, wl: Workload) -> bool:
        """Does the workload have an option at all?"""
        uniform, split = self._admits(wl)
        return bool(uniform) or (split is not None and all(split))

    def usage(self, wl: Workload, flavor: str) -> dict[FR, int]:
        """What ``wl`` asks for with every pod set on ``flavor`` (the same dictionary for a
        shape: never changed by its users)."""
        usages = self._of[id(wl)][0].usages
        found = usages.get(flavor)
        if found is None:
            charging = self._model.teams[wl.team].charging
            found = usages[flavor] = usage_of(wl, (flavor,) * len(wl.podsets), charging)
        return found

    def usage_on(self, wl: Workload, flavors: tuple[str, ...]) -> dict[FR, int]:
        """What ``wl`` asks for with pod set i on ``flavors[i]`` (shared like :meth:`usage`)."""
        if all(f == flavors[0] for f in flavors):
            return self.usage(wl, flavors[0])
        usages = self._of[id(wl)][0].usages
        found = usages.get(flavors)
        if found is None:
            charging = self._model.teams[wl.team].charging
            found = usages[flavors] = usage_of(wl, flavors, charging)
        return found

    def _podset_usage(self, wl: Workload, index: int, flavor: str) -> dict[FR, int]:
        usages = self._of[id(wl)][0].podset_usages
        found = usages.get((index, flavor))
        if found is None:
            charging = self._model.teams[wl.team].charging
            found = usages[(index, flavor)] = podset_usage(wl.podsets[index], flavor, charging)
        return found

    def option(self, wl: Workload, flavor: str) -> Option:
        """One flavor for all pod sets, with its quota standing now."""
        usage = self.usage(wl, flavor)
        problem = self._state.quota_problem(wl.team, usage)
        within = self._state.within_nominal(wl.team, usage)
        mode = SHORT if problem is not None else WITHIN if within else BORROWING
        return Option((flavor,) * len(wl.podsets), usage, mode, problem, within)

    def assign(
        self, wl: Workload, avoid: frozenset[tuple[int, str]] = frozenset()
    ) -> Option | None:
        """Kueue's assignment of a flavor per pod set, with its quota standing now (module
        docstring); None unless the pod sets are admitted by different flavors, each by some,
        and the assignment puts them on more than one flavor. ``avoid``: (pod set index,
        flavor) pairs left out (their nodes had no room for the pod set)."""
        split = self.split(wl)
        if split is not None and avoid:
            split = tuple(
                tuple(f for f in flavors if (index, f) not in avoid)
                for index, flavors in enumerate(split)
            )
        return self._assign(wl, split)

    def _assign(self, wl: Workload, split: tuple[tuple[str, ...], ...] | None) -> Option | None:
        if split is None or not all(split):
            return None
        state = self._state
        team = wl.team
        stop_at_borrowing = self._model.teams[team].stop_at_borrowing
        taken: dict[FR, int] = {}
        chosen: list[str] = []
        first_problem: PendingReason | None = None
        for index, flavors in enumerate(split):
            pick: str | None = None
            borrowing: str | None = None
            reclaimable: str | None = None
            for flavor in flavors:
                need = self._podset_usage(wl, index, flavor)
                trial = {fr: taken.get(fr, 0) + v for fr, v in need.items()}
                within = state.within_nominal(team, trial)
                if state.quota_problem(team, trial) is None:
                    if within or stop_at_borrowing:
                        pick = flavor
                        break
                    borrowing = borrowing or flavor
                elif reclaimable is None and within:
                    reclaimable = flavor
            if pick is None:
                pick = borrowing or reclaimable or flavors[0]
                if first_problem is None:
                    need = self._podset_usage(wl, index, pick)
                    trial = {fr: taken.get(fr, 0) + v for fr, v in need.items()}
                    problem = state.quota_problem(team, trial)
                    if problem is not None:
                        name = wl.podsets[index].name
                        first_problem = problem.wrapped(
                            f"pod set {name!r}: {problem}", "pod-set", name
                        )
            chosen.append(pick)
            for fr, v in self._podset_usage(wl, index, pick).items():
                taken[fr] = taken.get(fr, 0) + v
        assignment = tuple(chosen)
        if all(f == assignment[0] for f in assignment):
            return None
        usage = self.usage_on(wl, assignment)
        problem = state.quota_problem(team, usage)
        if problem is not None and first_problem is not None:
            problem = first_problem
        within = state.within_nominal(team, usage)
        mode = SHORT if problem is not None else WITHIN if within else BORROWING
        return Option(assignment, usage, mode, problem, within)

    def first_option(self, wl: Workload) -> Option | None:
        """The first option (the first uniform one, else Kueue's assignment), if any."""
        uniform, split = self._admits(wl)
        if uniform:
            return self.option(wl, uniform[0])
        return self._assign(wl, split)

    def none_eligible(self, wl: Workload) -> PendingReason:
        """Why no option exists: the team does not cover a resource it asks (``refused``), or
        no node admits it (``no-node``)."""
        unavailable = self._model.teams[wl.team].unavailable(wl)
        if unavailable is not None:
            return unavailable
        if not self._state.flavors_with_nodes:
            return PendingReason(
                "no Ready, schedulable nodes in the cluster", "no-node", ("no-nodes",)
            )
        for ps in wl.podsets:  # a topology request no flavor with nodes for it can take
            with_nodes = [f for f in self._candidates(wl) if len(self._state.fit.eligible(f, ps))]
            refusals = [self._model.topology_refusal(f, ps) for f in with_nodes]
            if with_nodes and all(refusals):
                refused = [r for r in refusals if r]
                message = f"pod set {ps.name!r}: " + "; ".join(refused)
                gist = ("topology", ps.name, *(r.gist for r in refused))
                return PendingReason(message, "no-node", gist)
        split = self.split(wl)
        if split is not None:
            for ps, flavors in zip(wl.podsets, split, strict=True):
                if not flavors:
                    wanted = f" matching {dict(ps.node_selector)}" if ps.node_selector else ""
                    return PendingReason(
                        f"no Ready, schedulable node{wanted} admits pod set {ps.name!r} "
                        "(labels, affinity, taints)",
                        "no-node",
                        ("no-node-admits", ps.name),
                    )
        selectors = {k: v for ps in wl.podsets for k, v in ps.node_selector.items()}
        wanted = f" matching {selectors}" if selectors else ""
        return PendingReason(
            f"no Ready, schedulable node{wanted} admits every pod set (labels, taints)",
            "no-node",
            ("no-node-admits-all",),
        )
