"""The mutable working state of one admission cycle: quota usage and node free space.

Built fresh from a :class:`Snapshot` at the start of a cycle, changed as the cycle admits and
preempts, and thrown away at the end: the engine never mutates its inputs.
"""

from __future__ import annotations

import itertools
import operator
from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetshare.governance import borrowing
from fleetshare.governance.quota import FR, NO_CHARGING, Charging, QuotaModel
from fleetshare.governance.snapshot import Running, Snapshot
from fleetshare.governance.tree import QuotaTree
from fleetshare.model.node import Node
from fleetshare.model.quantity import format_quantity
from fleetshare.model.reason import PendingReason, Reason
from fleetshare.model.workload import PodSet, Workload
from fleetshare.placement.fit import NodeFit, PlacementPlan
from fleetshare.policy.schema import ClusterPolicy

ZERO_WEIGHT = 1e-6
"""Fair-share weight used in place of 0, so zero-weight teams still compare with each other."""

CAPACITY_BELOW_QUOTA = "capacity-below-quota"
"""Warning category: the quotas add up to more than the Ready nodes offer."""


def usage_of(
    workload: Workload, flavors: Sequence[str], charging: Charging | None = None
) -> dict[FR, int]:
    """What a workload counts in quota, per (flavor, resource), with pod set i on
    ``flavors[i]``, as its team's ``charging`` says (default: requests as they are)."""
    charging = charging or NO_CHARGING
    out: dict[FR, int] = {}
    for flavor, podset in zip(flavors, workload.podsets, strict=True):
        charging.usage(podset, flavor, out)
    return out


def podset_usage(podset: PodSet, flavor: str, charging: Charging | None = None) -> dict[FR, int]:
    """What one pod set counts in quota on ``flavor`` (as :func:`usage_of`)."""
    return (charging or NO_CHARGING).usage(podset, flavor)


@dataclass(slots=True, eq=False)
class Admitted:
    """A workload holding resources during the cycle (running before, or admitted in it)."""

    workload: Workload
    flavors: tuple[str, ...]
    usage: dict[FR, int]
    plan: PlacementPlan
    admitted_at: float
    this_cycle: bool = False
    removed: bool = field(default=False)
    podsets: tuple[PodSet, ...] = ()
    """The pod sets as admitted (fewer pods under partial admission); the workload's own
    when not given."""

    def __post_init__(self) -> None:
        if not self.podsets:
            self.podsets = self.workload.podsets


def amount(fr: FR, value: int) -> str:
    """``2 nvidia.com/gpu`` for messages."""
    return f"{format_quantity(value, fr[1])} {fr[1]}"


class CycleState:
    """Quota tree + node fit + the admitted workloads, kept consistent with each other."""

    def __init__(self, model: QuotaModel, cluster: ClusterPolicy, snapshot: Snapshot) -> None:
        self._setup(model, cluster, snapshot.nodes)
        self.now = snapshot.now
        self._pending = snapshot.pending
        for running in snapshot.running:
            self.load(running)
        self._set_target()

    _pending: Sequence[Workload]

    def _setup(self, model: QuotaModel, cluster: ClusterPolicy, nodes: Sequence[Node]) -> None:
        self.model = model
        self.cluster = cluster
        self.now = 0.0
        self.preempted_since_change: frozenset[str] = frozenset()
        self.preempted_by: Mapping[str, frozenset[str]] = {}
        """``Snapshot.preempted_since_change`` and ``preempted_by``, set per cycle."""
        self.flavor_of = {n.name: model.flavor_of(n) for n in nodes}
        capacity: dict[FR, int] = {}
        flavors_with_nodes: set[str] = set()
        for node in nodes:
            flavor = self.flavor_of[node.name]
            if not node.schedulable or flavor is None:
                continue
            flavors_with_nodes.add(flavor)
            for resource, value in node.allocatable.items():
                key = (flavor, resource)
                capacity[key] = capacity.get(key, 0) + value
        self.capacity = capacity
        self.flavors_with_nodes = flavors_with_nodes
        self.tree = QuotaTree(model, capacity, cluster.idle_resource_sharing)
        self.fit = NodeFit(nodes, self.flavor_of, model.quota_only, cluster.placement)
        self.admitted: dict[str, Admitted] = {}
        self.by_team: dict[str, list[Admitted]] = {}
        self._by_team_flavor: dict[tuple[str, str], list[Admitted]] = {}
        self._share: dict[str, float] = {}
        self._lowest: dict[str, tuple[int, int | None]] = {}
        self.version: dict[str, int] = {}
        """Per team, bumped whenever its usage changes (for callers' caches)."""
        self._pending = ()
        self._pending_by_team: dict[str, list[Workload]] | None = None
        self.removed_log: list[Admitted] = []
        """Entries :meth:`remove` flagged (a :class:`StateCache` resets them afterwards)."""
        self.admitted_times: list[float] = []
        """Sorted admission times of the snapshot's running work (not of work admitted by
        the cycle; read only in a cycle)."""
        self.memo: dict[str, dict[Any, Any]] = {}
        """Caches of what depends only on the nodes and the model, shared by forks."""
        self.warnings = self._oversubscription()

    @classmethod
    def empty(cls, model: QuotaModel, cluster: ClusterPolicy, nodes: Sequence[Node]) -> CycleState:
        """The state of ``nodes`` with nothing running and nothing pending."""
        state = cls.__new__(cls)
        state._setup(model, cluster, nodes)
        return state

    def fork(self, now: float, pending: Sequence[Workload]) -> CycleState:
        """A copy to run one cycle on: usage, free space and indexes are copied, the nodes,
        quotas and caches that depend on them only are shared; admitted entries are shared
        (a cycle only flips their ``removed`` flag, see :attr:`removed_log`)."""
        new = object.__new__(CycleState)
        new.model = self.model
        new.cluster = self.cluster
        new.now = now
        new.flavor_of = self.flavor_of
        new.capacity = self.capacity
        new.flavors_with_nodes = self.flavors_with_nodes
        new.tree = self.tree.fork()
        new.fit = self.fit.fork()
        new.admitted = self.admitted.copy()
        new.by_team = {team: entries.copy() for team, entries in self.by_team.items()}
        new._by_team_flavor = {key: e.copy() for key, e in self._by_team_flavor.items()}
        new._share = {}
        new._lowest = {}
        new.version = {}
        new._pending = pending
        new._pending_by_team = None
        new.removed_log = []
        new.admitted_times = self.admitted_times
        new.memo = self.memo
        new.warnings = list(self.warnings)
        new._set_target()
        return new

    def _set_target(self) -> None:
        """FGD's target workload: the pods of the running and pending work."""
        if self.cluster.placement == "fgd":
            running = (ps for e in self.admitted.values() for ps in e.podsets)
            pending = (ps for wl in self._pending for ps in wl.podsets)
            self.fit.set_target(itertools.chain(running, pending))

    def lowest_priority(self, team: str) -> int | None:
        """The lowest priority of the team's admitted work (None: none), cached per version."""
        version = self.version.get(team, 0)
        cached = self._lowest.get(team)
        if cached is None or cached[0] != version:
            found = min(
                (e.workload.priority for e in self.by_team.get(team, ()) if not e.removed),
                default=None,
            )
            cached = self._lowest[team] = (version, found)
        return cached[1]

    def waiting_within(
        self, team: str, resource: str, room: int, above_priority: int | None
    ) -> bool:
        """Has ``team`` work still pending that asks for some but at most ``room`` of
        ``resource`` (with ``above_priority``: only work of a higher priority than that)?"""
        if self._pending_by_team is None:
            self._pending_by_team = {}
            for wl in self._pending:
                self._pending_by_team.setdefault(wl.team, []).append(wl)
        for wl in self._pending_by_team.get(team, ()):
            entry = self.admitted.get(wl.name)
            if entry is not None and not entry.removed:
                continue
            if above_priority is not None and wl.priority <= above_priority:
                continue
            requests = self.model.teams[team].charging.requests
            asked = sum(ps.count * requests(ps.requests).get(resource, 0) for ps in wl.podsets)
            if 0 < asked <= room:
                return True
        return False

    def load(self, running: Running) -> Admitted:
        """Take the quota and node resources of a running workload."""
        wl = running.workload
        admitted = running.admitted()
        flavors = running.assignment.flavors
        rules = self.model.teams.get(wl.team)
        entry = Admitted(
            wl,
            flavors,
            usage_of(admitted, flavors, rules.charging if rules else None),
            self.fit.plan_of(running.assignment.placement, running.assignment.gpus),
            running.admitted_at,
            podsets=admitted.podsets,
        )
        self.admitted[wl.name] = entry
        self._index(entry)
        if wl.team in self.model.teams:
            self.tree.add(wl.team, entry.usage)
        self.fit.apply(entry.podsets, entry.plan, 1)
        insort(self.admitted_times, entry.admitted_at)
        return entry

    def load_all(self, items: Sequence[tuple[Running, Mapping[FR, int] | None]]) -> list[Admitted]:
        """:meth:`load` of many running workloads at once, into a state with none loaded
        (the same state: quota usage summed per team before it enters the tree, free space
        taken in one array operation, admission times sorted once). Each item may carry its
        workload's usage already computed under this state's quota model (None: computed)."""
        out = []
        per_team: dict[str, dict[FR, int]] = {}
        for running, known in items:
            wl = running.workload
            admitted = running.admitted()
            flavors = running.assignment.flavors
            if known is None:
                rules = self.model.teams.get(wl.team)
                known = usage_of(admitted, flavors, rules.charging if rules else None)
            entry = Admitted(
                wl,
                flavors,
                dict(known),
                self.fit.plan_of(running.assignment.placement, running.assignment.gpus),
                running.admitted_at,
                podsets=admitted.podsets,
            )
            self.admitted[wl.name] = entry
            self._index(entry)
            if wl.team in self.model.teams:
                total = per_team.setdefault(wl.team, {})
                for fr, amount in entry.usage.items():
                    total[fr] = total.get(fr, 0) + amount
            out.append(entry)
        for team, total in per_team.items():
            self.tree.add(team, total)
        self.fit.apply_all([(e.podsets, e.plan) for e in out])
        self.admitted_times.extend(e.admitted_at for e in out)
        self.admitted_times.sort()
        return out

    def unload(self, entry: Admitted) -> None:
        """Undo :meth:`load` (the workload stopped running)."""
        wl = entry.workload
        if self.admitted.get(wl.name) is entry:
            del self.admitted[wl.name]
        team = wl.team
        self.by_team[team].remove(entry)
        for flavor in dict.fromkeys(entry.flavors):
            self._by_team_flavor[(team, flavor)].remove(entry)
        if team in self.model.teams:
            self.tree.add(team, entry.usage, -1)
        self.fit.apply(entry.podsets, entry.plan, -1)
        del self.admitted_times[bisect_left(self.admitted_times, entry.admitted_at)]

    def _changed(self, team: str) -> None:
        """The team's usage changed: so did the shares of its groups that order work."""
        for name in self.model.fair_paths.get(team, (team,)):
            self._share.pop(name, None)
            self.version[name] = self.version.get(name, 0) + 1

    def _index(self, entry: Admitted) -> None:
        team = entry.workload.team
        self.by_team.setdefault(team, []).append(entry)
        for flavor in dict.fromkeys(entry.flavors):
            self._by_team_flavor.setdefault((team, flavor), []).append(entry)

    def entries(self, team: str, flavors: Iterable[str]) -> list[Admitted]:
        """A team's admitted workloads that use any of ``flavors`` (each once)."""
        out: dict[int, Admitted] = {}
        for flavor in flavors:
            for entry in self._by_team_flavor.get((team, flavor), ()):
                out[id(entry)] = entry
        return list(out.values())

    def overcommitted(self, frs: Iterable[FR]) -> list[FR]:
        """Those of ``frs`` whose quotas add up to more than Ready, schedulable nodes offer."""
        return [
            fr
            for fr in frs
            if fr[1] not in self.model.not_offered
            and self.tree.allocated.get(fr, 0) > self.capacity.get(fr, 0)
        ]

    def _oversubscription(self) -> list[Reason]:
        out = []
        for fr in sorted(self.model.governed):
            if fr[1] in self.model.not_offered:
                continue  # counted in quota only: no node offers it
            allocated = self.tree.allocated.get(fr, 0)
            cap = self.capacity.get(fr, 0)
            if allocated > cap:
                out.append(
                    Reason(
                        CAPACITY_BELOW_QUOTA,
                        f"quotas for {fr[1]} on {fr[0]} add up to "
                        f"{format_quantity(allocated, fr[1])} but Ready, schedulable nodes offer "
                        f"{format_quantity(cap, fr[1])}: guaranteed work may wait for capacity",
                        {"quota": allocated, "capacity": cap},
                    )
                )
        return out

    # -- changes ---------------------------------------------------------------------------

    def admit(self, entry: Admitted) -> None:
        """Take a workload's quota and node resources."""
        self.admitted[entry.workload.name] = entry
        self._index(entry)
        self._changed(entry.workload.team)
        self.tree.add(entry.workload.team, entry.usage)
        self.fit.apply(entry.podsets, entry.plan, 1)

    def remove(self, entry: Admitted) -> None:
        """Give back a workload's quota and node resources (preemption)."""
        entry.removed = True
        self.removed_log.append(entry)
        self._changed(entry.workload.team)
        if entry.workload.team in self.model.teams:
            self.tree.add(entry.workload.team, entry.usage, -1)
        self.fit.apply(entry.podsets, entry.plan, -1)

    def restore(self, entry: Admitted) -> None:
        """Undo :meth:`remove`."""
        entry.removed = False
        self._changed(entry.workload.team)
        if entry.workload.team in self.model.teams:
            self.tree.add(entry.workload.team, entry.usage)
        self.fit.apply(entry.podsets, entry.plan, 1)

    # -- quota questions -------------------------------------------------------------------

    def within_nominal(self, team: str, usage: Mapping[FR, int]) -> bool:
        """True when the request stays inside the team's own guaranteed quota."""
        return self.tree.within_quota(team, usage, self.model.governed)

    def quota_problem(self, team: str, usage: Mapping[FR, int]) -> PendingReason | None:
        """None when quota and borrowing rules allow the request, else why not (a ``quota``
        reason)."""
        tree = self.tree
        node = self.model.nodes[team]
        for fr, value in usage.items():
            if value <= 0 or fr not in self.model.governed:
                continue
            used = tree.usage(team, fr)
            quota = tree.quota(team, fr)
            available = tree.available(team, fr)
            borrow_after = max(0, used + value - quota)
            if available < value:
                return self._explain_short(team, fr, value, used, quota, available, borrow_after)
            percent = node.idle_percent.get(fr)
            if borrow_after > 0 and percent is not None:
                idle = tree.idle_for(team, fr)
                limit = borrowing.idle_limit(idle, percent)
                if borrow_after > limit:
                    why = f"{percent:g}% of {format_quantity(idle, fr[1])} idle"
                    return borrowing.limit_message(fr, borrow_after, limit, why, "idle")
        return None

    def ceiling(self, team: str, fr: FR) -> float:
        """How much more the team may take under its own borrowing limits, whatever others do."""
        tree = self.tree
        node = self.model.nodes[team]
        limit = node.borrowing_limit.get(fr)
        percent = node.idle_percent.get(fr)
        by_idle = (
            None if percent is None else borrowing.idle_limit(tree.idle_for(team, fr), percent)
        )
        return borrowing.ceiling(
            tree.quota(team, fr),
            tree.usage(team, fr),
            None if limit is None else limit.amount,
            by_idle,
        )

    def _explain_short(
        self, team: str, fr: FR, value: int, used: int, quota: int, available: int, borrow: int
    ) -> PendingReason:
        pool = self.tree.pool_available(fr)
        key = (team, fr, value, used, quota, available, borrow, pool)
        messages = self.memo.setdefault("short", {})
        found: PendingReason | None = messages.get(key)
        if found is None:
            if len(messages) > 100_000:
                messages.clear()
            found = messages[key] = self._compose_short(*key)
        return found

    def _compose_short(
        self,
        team: str,
        fr: FR,
        value: int,
        used: int,
        quota: int,
        available: int,
        borrow: int,
        pool: int,
    ) -> PendingReason:
        """Why ``team`` may not take ``value`` of ``fr`` (a ``quota`` reason), keyed by its
        kind, the team, the flavor and the resource."""
        q = format_quantity
        res, flavor = fr[1], fr[0]
        if used + value <= quota:
            return PendingReason(
                f"{team}'s quota of {amount(fr, quota)} on {flavor} is lent out: "
                f"{q(available, res)} available now, needs {q(value, res)}",
                "quota",
                ("lent-out", team, flavor, res),
            )
        limit = self.model.nodes[team].borrowing_limit.get(fr)
        if limit is not None and borrow > limit.amount:
            if limit.amount == 0 and not self.model.nodes[team].can_borrow:
                return PendingReason(
                    f"needs {amount(fr, value)} on {flavor} but only "
                    f"{q(max(0, quota - used), res)} of quota {q(quota, res)} is unused, and "
                    f"{limit.why}",
                    "quota",
                    ("may-not-borrow", team, flavor, res),
                )
            return borrowing.limit_message(fr, borrow, limit.amount, limit.why, "limit")
        unlent = 0 if self.cluster.idle_resource_sharing else self.tree.unallocated.get(fr, 0)
        return PendingReason(
            f"not enough quota to borrow for {res} on {flavor}: needs {q(value, res)}, {team} "
            f"may take {q(available, res)} (quota {q(quota, res)}, {q(used, res)} in use, "
            f"{q(max(0, pool), res)} of the quota in the cluster unused and lendable)"
            + (
                f"; {q(unlent, res)} unallocated is not lent: idle resource sharing is off"
                if unlent
                else ""
            ),
            "quota",
            ("short-to-borrow", team, flavor, res, bool(unlent)),
        )

    def dominant_share(self, team: str, extra: Mapping[FR, int] | None = None) -> float:
        """A team's weighted dominant resource share (:meth:`share`); with ``extra``, the
        share it would have with that much more usage."""
        return self.share(team, extra)

    def share(self, name: str, extra: Mapping[FR, int] | None = None) -> float:
        """Kueue's weighted dominant resource share of a team or group: per resource, what it
        uses beyond its subtree quota (with ``extra`` more usage at the node), summed over
        flavors, over what its parent could lend of that resource at most
        (:meth:`QuotaTree.could_lend`; a resource it could lend none of is left out); the
        largest ratio, divided by its weight. 0 when it borrows nothing."""
        if extra is None and name in self._share:
            return self._share[name]
        tree = self.tree
        frs = set(tree.quota_frs(name))
        if extra:
            frs |= extra.keys()
        borrowed: dict[str, int] = {}
        for fr in frs & self.model.governed:
            used = tree.node_usage(name, fr) + (extra.get(fr, 0) if extra else 0)
            over = used - tree.subtree_quota(name, fr)
            if over > 0:
                borrowed[fr[1]] = borrowed.get(fr[1], 0) + over
        share = 0.0
        parent = tree.parent_of(name)
        if borrowed and parent is not None:
            lendable = tree.could_lend(parent)
            share = max(
                (b / lendable[r] for r, b in borrowed.items() if lendable.get(r, 0) > 0),
                default=0.0,
            )
        # A weight of 0 (HyperPod's default) ranks last, yet stays comparable between teams.
        share /= max(self.model.nodes[name].weight, ZERO_WEIGHT)
        if extra is None:
            self._share[name] = share
        return share

    def shares_with(
        self, changes: Mapping[str, Mapping[FR, int]], names: Sequence[str]
    ) -> dict[str, float]:
        """The shares of ``names`` (teams or groups) as they would be with each team's usage
        changed by ``changes`` (signed amounts); the tree is changed and changed back."""
        tree = self.tree
        for team, delta in changes.items():
            tree.add(team, delta)
        try:
            return {name: self._fresh_share(name) for name in names}
        finally:
            for team, delta in changes.items():
                tree.add(team, delta, -1)

    def _fresh_share(self, name: str) -> float:
        cached = self._share.pop(name, None)
        try:
            return self.share(name)
        finally:
            self._share.pop(name, None)
            if cached is not None:
                self._share[name] = cached

    def fair_key(self, team: str, usage: Mapping[FR, int]) -> tuple[float, ...]:
        """The shares that order ``team``'s work asking for ``usage`` under fair sharing,
        from the top (``QuotaModel.fair_paths``): each group's as it stands, then the team's
        with the work admitted. Compared in order, as Kueue's tournament compares the
        children of each cohort (it also adds the work at the groups' level)."""
        path = self.model.fair_paths.get(team, (team,))
        return (*(self.share(group) for group in path[:-1]), self.share(team, usage))

    def key_version(self, team: str) -> object:
        """The usage versions :meth:`fair_key` depends on: the team's, and its groups' when its
        fair path has groups (then a tuple)."""
        path = self.model.fair_paths.get(team)
        if path is None or len(path) == 1:
            return self.version.get(team, 0)
        version = self.version
        return tuple(version.get(name, 0) for name in path)


class StateCache:
    """Carries a cycle's starting state over to the next cycle of the same run.

    Building a :class:`CycleState` from a snapshot costs a pass over every node and every
    running workload. Between two cycles of a replay, the nodes rarely change and only a few
    workloads start or stop, so this keeps a *base* state (the nodes and the running work of
    the last snapshot, nothing pending), applies the difference to the next snapshot (running
    workloads are matched by identity: a :class:`Running` object that is still there is still
    running as it was), and hands each cycle a :meth:`CycleState.fork` of it. The base is
    rebuilt from scratch when the model or the cluster policy changes; when only node objects
    change (a node joins, leaves, is cordoned), the base is rebuilt on the new nodes and the
    running work reloaded in one go (:meth:`CycleState.load_all`), keeping its usage.

    The state a cycle gets is equal to ``CycleState(model, cluster, snapshot)``: same usage,
    free space, admitted entries and indexes (only the order of dictionaries may differ, and
    no decision depends on it).
    """

    def __init__(self) -> None:
        self._model: QuotaModel | None = None
        self._cluster: ClusterPolicy | None = None
        self._nodes: tuple[Node, ...] = ()
        self._nodes_ref: object = None
        self._base: CycleState | None = None
        self._entries: dict[int, tuple[Running, Admitted]] = {}
        self._ids: set[int] = set()
        self._last_log: list[Admitted] = []
        self.rebuilds = 0
        """How many times the base was built from scratch (for tests)."""
        self.changes: tuple[bool, int, list[Running]] = (True, 0, [])
        """The last call's difference: rebuilt from scratch, how many running workloads
        left, and those that started."""

    def _same_nodes(self, nodes: Sequence[Node]) -> bool:
        if nodes is self._nodes_ref and isinstance(nodes, tuple):
            return True
        mine = self._nodes
        return len(nodes) == len(mine) and all(map(operator.is_, nodes, mine))

    def state(self, model: QuotaModel, cluster: ClusterPolicy, snapshot: Snapshot) -> CycleState:
        """The state for a cycle over ``snapshot`` (a fresh fork: the cycle may change it)."""
        for entry in self._last_log:  # flags flipped by the previous cycle's preemptions
            entry.removed = False
        self._last_log = []
        rebuilds = self.rebuilds
        base = self._base
        if (
            base is None
            or model is not self._model
            or cluster is not self._cluster
            or not self._same_nodes(snapshot.nodes)
        ):
            kept = (
                list(self._entries.items())
                if base is not None and model is self._model and cluster is self._cluster
                else []
            )
            base = self._base = CycleState.empty(model, cluster, snapshot.nodes)
            self._model, self._cluster = model, cluster
            self._nodes = tuple(snapshot.nodes)
            self._nodes_ref = snapshot.nodes
            self._entries = {}
            self.rebuilds += 1
            if kept:  # only the nodes changed: the running work is loaded again in one go,
                # with the usage it had (it depends on the quota model only)
                loaded = base.load_all([(run, old.usage) for _, (run, old) in kept])
                self._entries = {
                    key: (run, entry) for (key, (run, _)), entry in zip(kept, loaded, strict=True)
                }
                self._ids = set(self._entries)
        rebuilt = self.rebuilds != rebuilds
        entries = self._entries
        running = snapshot.running
        ids = set(map(id, running))
        known = set(entries) if rebuilt else self._ids
        gone = known - ids
        new = ids - known
        self._ids = ids
        for i in gone:
            base.unload(entries.pop(i)[1])
        added: list[Running] = []
        if new:  # in snapshot order: where a share goes may depend on the order
            for item in running:
                i = id(item)
                if i in new:
                    entries[i] = (item, base.load(item))
                    added.append(item)
        self.changes = (rebuilt, len(gone), added)
        state = base.fork(snapshot.now, snapshot.pending)
        self._last_log = state.removed_log
        return state
