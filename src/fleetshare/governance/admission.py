"""The admission cycle: which pending workloads to admit, where, and whom to preempt.

Order. Each team's queue is ordered by priority, then submit time (FIFO). Across teams, the
heads are merged by: work that fits within its team's own quota first, then (with fair
sharing) the lowest dominant resource share, then priority, then submit time. Every pending
workload is considered in one cycle — not one head per queue as in Kueue — and one that does
not fit is skipped, so a large job never blocks smaller ones behind it (no head-of-line
blocking).

Starvation. A workload pending longer than ``starvation_guard_seconds`` that could fit in an
empty cluster *reserves* what it asks for: later work of the same or lower priority that would
compete for the same (flavor, resource) — its own team's work, or anyone's borrowing — is held
back until it fits. Work within another team's own quota is never held back.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from fleetshare.governance.preemption import Victim, find_victims
from fleetshare.governance.preemption_cache import FailedPreemptions
from fleetshare.governance.quota import FR, QuotaModel, compile_policy
from fleetshare.governance.snapshot import (
    Admission,
    Assignment,
    CycleResult,
    Pending,
    Preemption,
    Snapshot,
)
from fleetshare.governance.starvation import Reservation, Reservations, held_message
from fleetshare.governance.state import Admitted, CycleState, usage_of
from fleetshare.model.catalog import Catalog
from fleetshare.model.workload import Workload
from fleetshare.placement.fit import NoFit, PlacementPlan
from fleetshare.policy.schema import Policy

_NOMINAL, _BORROW, _SHORT = 0, 1, 2


@dataclass(slots=True)
class _Option:
    """One way to run a workload: a flavor per pod set, and its quota standing."""

    flavors: tuple[str, ...]
    usage: dict[FR, int]
    mode: int
    problem: str | None
    within: bool
    """Within the team's own quota (whether or not that quota is lent out now)."""


class Engine:
    """Governance for one policy: call :meth:`cycle` with a snapshot, get decisions back."""

    def __init__(self, policy: Policy, catalog: Catalog | None = None) -> None:
        self.policy = policy
        self.model: QuotaModel = compile_policy(policy, catalog)

    def cycle(self, snapshot: Snapshot) -> CycleResult:
        """Run one admission cycle; the snapshot is not modified."""
        return _Cycle(self.model, self.policy, snapshot).run()


def queue_key(wl: Workload) -> tuple[int, float, str]:
    """Order within a team's queue: priority, then FIFO."""
    return (-wl.priority, wl.submit_time, wl.name)


class _Cycle:
    def __init__(self, model: QuotaModel, policy: Policy, snapshot: Snapshot) -> None:
        self.model = model
        self.policy = policy
        self.snapshot = snapshot
        self.state = CycleState(model, policy.cluster, snapshot)
        self.result = CycleResult(warnings=list(self.state.warnings))
        self.reservations = Reservations()
        self.failed_preemption = FailedPreemptions()
        self._flavor_cache: dict[str, tuple[str, ...]] = {}
        self._keys: dict[str, tuple[int, tuple[object, ...]]] = {}
        self._held: str | None = None
        self._fits_empty: dict[tuple[object, ...], bool] = {}
        queues: dict[str, list[tuple[tuple[int, float, str], Workload]]] = {}
        for wl in snapshot.pending:
            queues.setdefault(self._lane(wl), []).append((queue_key(wl), wl))
        for queue in queues.values():
            heapq.heapify(queue)
        self.queues = queues

    def _lane(self, wl: Workload) -> str:
        """Each team has two queues: work that fits its own quota now, and the rest.

        Heads are merged across both, so work within quota is never stuck behind a team's
        borrowing work while other teams borrow the quota away.
        """
        if wl.team not in self.model.teams:
            return f"{wl.team}/unknown"
        flavors = self._flavors(wl)
        within = bool(flavors) and self.state.within_nominal(wl.team, self._usage(wl, flavors[0]))
        return f"{wl.team}/{'quota' if within else 'borrow'}"

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> CycleResult:
        if self.policy.cluster.starvation_guard_seconds is not None:
            self._reserve_starving()
        queues = self.queues
        heap: list[tuple[tuple[object, ...], str, str]] = []

        def push_head(lane: str) -> None:
            queue = queues.get(lane)
            while queue:
                wl = queue[0][1]
                key = self._key(wl)
                if key[0] and lane.endswith("/quota"):
                    # no longer within quota now that its team took more: to the borrowing
                    # lane, so the team's work still within quota is not stuck behind it
                    heapq.heappop(queue)
                    borrow = f"{wl.team}/borrow"
                    heapq.heappush(queues.setdefault(borrow, []), (queue_key(wl), wl))
                    push_head(borrow)
                    continue
                heapq.heappush(heap, (key, lane, wl.name))
                return

        for lane in list(queues):
            push_head(lane)
        while heap:
            key, lane, name = heapq.heappop(heap)
            queue = queues[lane]
            if not queue or queue[0][1].name != name:
                continue  # a stale entry: that workload was taken or moved
            wl = queue[0][1]
            fresh = self._key(wl)
            if fresh != key and fresh[0] and lane.endswith("/quota"):
                push_head(lane)
                continue
            if fresh != key and heap and fresh > heap[0][0]:
                heapq.heappush(heap, (fresh, lane, name))
                continue
            heapq.heappop(queue)
            self._consider(wl)
            push_head(lane)
        self._positions()
        self.result.wake_at = self._wake_at()
        return self.result

    def _wake_at(self) -> float | None:
        if not self.result.pending:
            return None
        now = self.snapshot.now
        settings = self.policy.cluster.preemption
        times = [
            entry.admitted_at + guard
            for entry in self.state.admitted.values()
            for guard in (settings.min_runtime_seconds, settings.reclaim_grace_seconds)
            if entry.admitted_at + guard > now
        ]
        guard = self.policy.cluster.starvation_guard_seconds
        if guard is not None:
            times += [
                p.workload.submit_time + guard
                for p in self.result.pending.values()
                if p.workload.submit_time + guard > now
            ]
        return min(times, default=None)

    def _key(self, wl: Workload) -> tuple[object, ...]:
        version = self.state.version.get(wl.team, 0)
        cached = self._keys.get(wl.name)
        if cached is not None and cached[0] == version:
            return cached[1]
        key = self._compute_key(wl)
        self._keys[wl.name] = (version, key)
        return key

    def _compute_key(self, wl: Workload) -> tuple[object, ...]:
        if wl.team not in self.model.teams:
            return (0, 0.0, -wl.priority, wl.submit_time, wl.name)
        flavors = self._flavors(wl)
        borrows = 0
        share = 0.0
        if flavors:
            usage = self._usage(wl, flavors[0])
            if not self.state.within_nominal(wl.team, usage):
                borrows = 1
                if self.policy.cluster.fair_share:
                    share = self.state.dominant_share(wl.team, usage)
        return (borrows, share, -wl.priority, wl.submit_time, wl.name)

    def _positions(self) -> None:
        """Queue position among the team's still-pending work (priority, then FIFO)."""
        waiting: dict[str, list[Workload]] = {}
        for pending in self.result.pending.values():
            waiting.setdefault(pending.workload.team, []).append(pending.workload)
        for queue in waiting.values():
            queue.sort(key=queue_key)
            for position, wl in enumerate(queue, start=1):
                reason = self.result.pending[wl.name].reason
                self.result.pending[wl.name] = Pending(wl, reason, position)

    # -- one workload ----------------------------------------------------------------------

    def _pend(self, wl: Workload, reason: str) -> None:
        self.result.pending[wl.name] = Pending(wl, reason, 0)

    def _consider(self, wl: Workload) -> None:
        rules = self.model.teams.get(wl.team)
        if rules is None:
            self._pend(wl, f"team {wl.team!r} has no quota policy")
            return
        if not rules.enabled:
            self._pend(wl, f"team {wl.team}'s quota is disabled")
            return
        flavors = self._flavors(wl)
        if not flavors:
            self._pend(wl, self._no_flavor(wl))
            return
        problems: list[str] = []
        options: list[_Option] = []
        self._held = None
        for flavor in flavors:  # the first flavor that fits within quota wins at once
            option = self._option(wl, flavor)
            options.append(option)
            if option.mode == _NOMINAL and self._try_place(wl, option, problems):
                return
        for option in options:
            if option.mode == _BORROW and self._try_place(wl, option, problems):
                return
        for option in options:
            if option.problem:
                problems.append(option.problem)
            if self._held_by(wl, option) is None and self._try_preemption(wl, option):
                return
        reason = self._held or "; ".join(dict.fromkeys(problems)) or "does not fit"
        self._pend(wl, reason)
        self._maybe_reserve(wl, options[0])

    def _try_place(self, wl: Workload, option: _Option, problems: list[str]) -> bool:
        """Admit if the pods fit and no starving workload holds this one back."""
        held = self._held_by(wl, option)
        if held is not None:  # quota would allow it: the reservation is what stops it
            if self._held is None:
                self._held = held_message(held, option.usage, self.snapshot.now)
            return False
        plan = self.state.fit.place(option.flavors, wl.podsets)
        if isinstance(plan, NoFit):
            problems.append(plan.message)
            return False
        self._admit(wl, option, plan)
        return True

    def _flavors(self, wl: Workload) -> tuple[str, ...]:
        """Flavors that can hold every pod set, the team's own flavors first (cached)."""
        found = self._flavor_cache.get(wl.name)
        if found is None:
            rules = self.model.teams[wl.team]
            with_nodes = self.state.flavors_with_nodes
            order = [f for f in rules.flavor_order if f in with_nodes]
            order += sorted(with_nodes - set(order))
            fit = self.state.fit
            found = tuple(f for f in order if all(len(fit.eligible(f, ps)) for ps in wl.podsets))
            self._flavor_cache[wl.name] = found
        return found

    def _usage(self, wl: Workload, flavor: str) -> dict[FR, int]:
        return usage_of(wl, (flavor,) * len(wl.podsets))

    def _option(self, wl: Workload, flavor: str) -> _Option:
        """One flavor for all pod sets, with its quota standing."""
        usage = self._usage(wl, flavor)
        problem = self.state.quota_problem(wl.team, usage)
        within = self.state.within_nominal(wl.team, usage)
        mode = _SHORT if problem is not None else _NOMINAL if within else _BORROW
        return _Option((flavor,) * len(wl.podsets), usage, mode, problem, within)

    def _no_flavor(self, wl: Workload) -> str:
        selectors = {k: v for ps in wl.podsets for k, v in ps.node_selector.items()}
        if not self.state.flavors_with_nodes:
            return "no Ready, schedulable nodes in the cluster"
        wanted = f" matching {selectors}" if selectors else ""
        return f"no Ready, schedulable node{wanted} admits every pod set (labels, taints)"

    # -- admission and preemption ----------------------------------------------------------

    def _admit(
        self,
        wl: Workload,
        option: _Option,
        plan: PlacementPlan,
        victims: list[Victim] = (),  # type: ignore[assignment]
    ) -> None:
        tree = self.state.tree
        before = {fr: tree.borrowed(wl.team, fr) for fr in option.usage}
        entry = Admitted(wl, option.flavors, option.usage, plan, self.snapshot.now, True)
        self.state.admit(entry)
        self.reservations.release(wl.name)
        borrowed: dict[str, int] = {}
        for fr in option.usage:
            extra = tree.borrowed(wl.team, fr) - before[fr]
            if extra > 0:
                borrowed[fr[1]] = borrowed.get(fr[1], 0) + extra
                if before[fr] == 0:  # the team's running work just became reclaimable
                    self.failed_preemption.forget({fr[0]})
        for victim in victims:
            self.result.preemptions.append(
                Preemption(victim.entry.workload, wl.name, victim.reason, self._why(victim, wl))
            )
        assignment = Assignment(option.flavors, self.state.fit.names(plan))
        self.result.admissions.append(Admission(wl, assignment, borrowed))

    def _why(self, victim: Victim, by: Workload) -> str:
        v = victim.entry.workload
        if victim.reason == "reclaim":
            return f"{by.team} reclaims its lent quota for {by.name}; {v.team} was borrowing"
        if victim.reason == "priority":
            return f"{by.name} (priority {by.priority}) preempts {v.name} (priority {v.priority})"
        return f"fair share: {by.team} borrows less than {v.team} (weighted dominant share)"

    def _try_preemption(self, wl: Workload, option: _Option) -> bool:
        if self.failed_preemption.known_to_fail(wl, option.flavors):
            return False
        state = self.state

        def fits() -> bool:
            if state.quota_problem(wl.team, option.usage) is not None:
                return False
            return not isinstance(state.fit.place(option.flavors, wl.podsets, explain=False), NoFit)

        victims = find_victims(state, wl, option.usage, fits)
        if victims is None:
            self.failed_preemption.record(wl, option.flavors)
            return False
        plan = state.fit.place(option.flavors, wl.podsets)
        assert not isinstance(plan, NoFit), "victims were chosen so that the workload fits"
        self.failed_preemption.forget(
            set(option.flavors).union(*(v.entry.flavors for v in victims))
        )
        self._admit(wl, option, plan, victims)
        return True

    # -- starvation guard ------------------------------------------------------------------

    def _held_by(self, wl: Workload, option: _Option) -> Reservation | None:
        if not self.reservations:
            return None
        return self.reservations.held_by(wl, option.usage, option.within)

    def _starving(self, wl: Workload) -> bool:
        guard = self.policy.cluster.starvation_guard_seconds
        return guard is not None and self.snapshot.now - wl.submit_time >= guard

    def _reserve_starving(self) -> None:
        """Before the cycle: every starving workload that does not fit now reserves, so the
        order in which the cycle meets workloads cannot let later work slip past it."""
        for wl in sorted(self.snapshot.pending, key=queue_key):
            rules = self.model.teams.get(wl.team)
            if rules is None or not rules.enabled or not self._starving(wl):
                continue
            flavors = self._flavors(wl)
            if not flavors:
                continue
            option = self._option(wl, flavors[0])
            free = self.state.fit.flavor_free
            if option.mode != _SHORT and all(v <= free(fr) for fr, v in option.usage.items()):
                continue  # probably fits; if it does not, the cycle reserves when it meets it
            self._maybe_reserve(wl, option)

    def _maybe_reserve(self, wl: Workload, option: _Option) -> None:
        if wl.name in self.reservations or not self._starving(wl):
            return
        if not self._could_ever_fit(wl, option):
            return
        usage = {fr: v for fr, v in option.usage.items() if v > 0}
        state = self.state
        team_only = any(
            value > state.ceiling(wl.team, fr)
            for fr, value in usage.items()
            if fr in self.model.governed
        )
        self.reservations.add(Reservation(wl, usage, team_only))

    def _could_ever_fit(self, wl: Workload, option: _Option) -> bool:
        """Would the workload fit in an empty cluster, within its team's limits?"""
        node = self.model.nodes[wl.team]
        for fr, value in option.usage.items():
            if fr not in self.model.governed:
                continue
            ceiling = node.quota.get(fr, 0)
            limit = node.borrowing_limit.get(fr)
            ceiling += self.state.capacity.get(fr, 0) if limit is None else limit.amount
            if value > min(ceiling, self.state.capacity.get(fr, 0)):
                return False
        shape = (option.flavors, tuple((ps.count, *ps.requests.items()) for ps in wl.podsets))
        known = self._fits_empty.get(shape)
        if known is None:
            fit = self.state.fit
            saved = fit.free
            fit.free = fit.allocatable
            try:
                plan = fit.place(option.flavors, wl.podsets, explain=False)
                known = self._fits_empty[shape] = not isinstance(plan, NoFit)
            finally:
                fit.free = saved
        return known
