"""The autoscaler's control loop: pending work in, cloud calls out.

Each time the scenario runner (or the simulator) has settled a moment, it calls
:meth:`Autoscaler.step`. The step

1. notes which of its nodes are empty or unhealthy, and which spot instances are interrupted;
2. removes nodes unhealthy for ``repair_after_seconds``. Their workloads were requeued
   through governance when the node failed, and the capacity they need is replaced at once by
   provisioning (step 3) — as in Karpenter, where evicted pods drive the replacement — so a
   node whose work already moved elsewhere is not replaced for nothing. Pools with a floor
   (instance-group minimums, schedules) get their count back by step 4;
3. batches new demand — pending workloads that governance would admit if the nodes were there
   (:func:`~fleetshare.governance.demand.admissible_demand`) and that no launched-but-not-yet-
   ready node was launched for — for ``batch_idle_seconds`` (at most ``batch_max_seconds``),
   then plans the cheapest launches (:func:`~fleetshare.autoscaling.provisioner.plan_nodes`)
   and launches them; an offering that runs out of capacity is marked unavailable by the cloud
   and the rest is re-planned at once;
4. keeps scheduled pool floors and ceilings, and removes nodes empty for their pool's
   ``consolidate_after`` (down to zero), then asks :mod:`~fleetshare.autoscaling.disruption`
   for at most one consolidation, expiry or drift action.

It returns what the runner must apply: nodes that join later (launch latency), nodes to
remove (with a reason; the runner requeues their workloads), and when to call again.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fleetshare.autoscaling.cloud import (
    AccountLimitError,
    CloudProvider,
    Instance,
    InsufficientCapacityError,
    LaunchRequest,
)
from fleetshare.autoscaling.cron import next_change, window_active
from fleetshare.autoscaling.disruption import (
    DRIFT,
    EMPTINESS,
    EXPIRATION,
    MULTI_NODE,
    REPAIR,
    SINGLE_NODE,
    Action,
    DisruptionSettings,
    DoNotDisrupt,
    NodeView,
    Pdb,
    PodView,
    State,
    decide,
    validate,
)
from fleetshare.autoscaling.forecast import Forecaster
from fleetshare.autoscaling.nodepool import NODES, NodePool, add_node, limit_passed, pool_usage
from fleetshare.autoscaling.provisioner import (
    POOL_LABEL,
    Launch,
    Plan,
    PodShape,
    launch_labels,
    plan_nodes,
    pool_taints,
)
from fleetshare.autoscaling.settings import AutoscalerSpec, DoNotDisruptSpec, PdbSpec
from fleetshare.autoscaling.warm import WarmCapacity, rise, since, warm_pods, warm_target
from fleetshare.control.changes import AutoscalerNote
from fleetshare.governance.admission import Engine
from fleetshare.governance.demand import Demand, admissible_demand
from fleetshare.governance.snapshot import Running, Snapshot
from fleetshare.governance.state import StateCache
from fleetshare.model.catalog import Catalog, ec2_name
from fleetshare.model.node import Node
from fleetshare.model.quantity import MILLI
from fleetshare.model.reason import Reason
from fleetshare.model.resources import parse_resources
from fleetshare.model.workload import PodSet, Workload
from fleetshare.placement.first_fit import Room, first_fit_together
from fleetshare.placement.topology import constraint

MAX_REPLANS = 3
REPLACE_GRACE = 60.0
"""Seconds a Ready replacement is kept even if empty, for the pods it was bought for."""

VOLUNTARY = (EXPIRATION, DRIFT, MULTI_NODE, SINGLE_NODE)
"""The disruption methods walked every ``disruption_interval_seconds`` (repair and emptiness,
cheap and urgent, are walked at every step)."""
TIME_BOUND = frozenset({"consolidate-after", "budget", "floor", "nominated"})
"""Reasons to keep a node that lapse with time alone: the next pass must look again."""
ANNOUNCED = frozenset({"training", "do-not-disrupt", "pdb", "budget"})
"""Reasons to keep a node that are logged (once per node and reason)."""
WAITED = {
    "consolidate-after": ("after", "waited"),
    "repair-grace": ("grace", "waited"),
}
"""Reasons that end after a known wait: (the wait, the time waited so far)."""


CONSOLIDATION_KINDS = frozenset({"delete", "replace"})


def removal(category: str, message: str = "") -> Reason:
    """Why a node is removed: ``category`` (``empty``, ``repair``, ``consolidation``,
    ``expire``, ``drift``, ``spot-interruption``, ``ceiling``, ...) and the words shown."""
    return Reason(category, message or category)


def action_removal(action: Action) -> Reason:
    """A disruption action's removal reason: its kind (delete and replace are consolidation)
    and its text, e.g. ``replace: consolidation: replace node-3 (...) with ...``."""
    category = "consolidation" if action.kind in CONSOLIDATION_KINDS else action.kind
    return Reason(category, f"{action.kind}: {action.reason}")


def _due(now: float, reasons: Mapping[str, Reason]) -> list[float]:
    """When the nodes kept for a reason that lapses with time may be looked at again."""
    out = []
    for reason in reasons.values():
        numbers = reason.numbers
        if reason.category == "nominated" and "left" in numbers:
            out.append(now + numbers["left"])
        elif reason.category in WAITED:
            wait, waited = WAITED[reason.category]
            if wait in numbers and waited in numbers:
                out.append(now + numbers[wait] - numbers[waited])
    return out


WarmRoom = tuple[dict[str, int], int, dict[str, str]]
"""Room to keep free: (requests of one pod in milli-units, pods, node selector)."""


@dataclass
class WarmPool:
    """A pool's warm capacity as it runs: its forecaster, its recent demand and rises."""

    setting: WarmCapacity
    forecaster: Forecaster
    latency: float = 0.0
    """The cloud's launch latency: a rise is how far demand climbs within it."""
    recent: deque[tuple[float, float]] = field(default_factory=deque)
    """(time, demand) change points of the last ``hold_seconds`` (and launch latency), and the
    one before."""
    rises: deque[tuple[float, float]] = field(default_factory=deque)
    """(time, rise) of the demand's climbs in the last ``burst_seconds``."""
    pods: int = 0
    """Warm pods kept at the latest step."""

    @classmethod
    def of(cls, setting: WarmCapacity, latency: float) -> WarmPool:
        """A pool's warm state, its forecaster seeded with the setting's ``history``."""
        warm = cls(setting, Forecaster(setting.spec()), latency)
        for at, value in setting.history:
            warm.observe(at, value)
        return warm

    def observe(self, at: float, value: float) -> None:
        """Demand is ``value`` from ``at`` on."""
        self.forecaster.observe(at, value)
        setting = self.setting
        if not self.recent or self.recent[-1][1] != value:
            if setting.burst_seconds:
                climb = rise(self.recent, at, value, self.latency)
                if climb > 0:
                    self.rises.append((at, climb))
            self.recent.append((at, value))
        start = at - max(setting.hold_seconds, self.latency if setting.burst_seconds else 0.0)
        while len(self.recent) > 1 and self.recent[1][0] <= start:
            self.recent.popleft()
        while self.rises and self.rises[0][0] < at - setting.burst_seconds:
            self.rises.popleft()

    def target(self, now: float, forecast: float) -> float:
        """The demand to be ready for (:func:`warm_target`) at ``now``."""
        setting = self.setting
        held = since(self.recent, now - setting.hold_seconds)
        burst = max((r for _, r in self.rises), default=0.0)
        return warm_target(forecast, (v for _, v in held), setting.margin, burst)


def _serves(pool: NodePool, selector: Mapping[str, str]) -> bool:
    """The pool's nodes would carry ``selector`` (as far as the pool's own labels and name
    tell: other keys, such as an instance type, are not judged here)."""
    labels = {**pool.labels, POOL_LABEL: pool.name}
    return all(labels.get(key, value) == value for key, value in selector.items())


SHOWN_NODES = 5
"""A pending workload's note names at most this many of the nodes launching for it."""


@dataclass
class ManagedNode:
    """A node the autoscaler launched, from launch to termination."""

    name: str
    instance: Instance
    pool: str
    reason: str
    node: Node
    joined: bool = False
    empty_since: float | None = None
    unhealthy_since: float | None = None
    terminated_at: float | None = None
    termination_reason: str | None = None
    termination_category: str | None = None
    for_workloads: tuple[str, ...] = ()
    held_until: float = 0.0
    """Pending work counts on this node's room: not removed as empty before then."""
    pods_changed_at: float | None = None
    pods_seen: frozenset[str] = frozenset()
    ready_at: float = 0.0
    """When the node is expected Ready: the provider's word, else launch + its latency."""

    def record(self) -> dict[str, Any]:
        """The JSON form (the ``"nodes"`` list of scenario output)."""
        inst = self.instance
        return {
            "node": self.name,
            "instance_id": inst.id,
            "pool": self.pool,
            "instance_type": inst.instance_type,
            "zone": inst.zone,
            "capacity_type": inst.capacity_type,
            "price_per_hour": round(inst.price_per_hour, 6),
            "launched_at": inst.launched_at,
            "ready_at": self.ready_at,
            "launch_reason": self.reason,
            "terminated_at": self.terminated_at,
            "termination_reason": self.termination_reason,
            "termination_category": self.termination_category,
        }


@dataclass
class Step:
    """What the runner applies after a step."""

    joins: list[tuple[float, Node]] = field(default_factory=list)
    removals: list[tuple[str, Reason]] = field(default_factory=list)
    """(node, reason): remove the node and requeue its workloads."""
    wake: list[float] = field(default_factory=list)
    """Call again at these times."""
    wake_if_busy: list[float] = field(default_factory=list)
    """...and at these while there is work (schedule changes, spot interruptions)."""
    log: list[dict[str, Any]] = field(default_factory=list)
    again: bool = False
    """Step again at once: nodes were removed while others waited only for the budget they
    used (removal is immediate, so the budget is free again)."""


def _first_fit(
    podset: PodSet,
    selector: Mapping[str, str],
    count: int,
    free: Sequence[Room],
    used: set[str] | None = None,
) -> int:
    """Place up to ``count`` pods of ``podset`` onto ``free`` room (taken); how many fit
    (the nodes they went to are added to ``used``)."""
    level, required = constraint(podset.required_topology, podset.preferred_topology)
    placed = first_fit_together(
        free,
        podset.requests,
        count,
        selector,
        podset.tolerations,
        podset.affinity,
        level if count == podset.count else None,  # the rest of a set already split
        required,
    )
    if used is not None:
        used.update(room.name for room, _ in placed)
    return sum(n for _, n in placed)


def _pod_views(entry: Running, offset: float) -> list[PodView]:
    """The disruption logic's view of a running workload's pods (times on the wall clock)."""
    wl = entry.workload
    kind = wl.labels.get("fleetshare.io/kind") or ("training" if wl.pod_count > 1 else "batch")
    preemptible = wl.labels.get("fleetshare.io/preemptible", "") == "true"
    out = []
    for podset, placement in zip(wl.podsets, entry.assignment.placement, strict=True):
        level, required = constraint(podset.required_topology, podset.preferred_topology)
        for node, count in placement:
            for i in range(count):
                out.append(
                    PodView(
                        name=f"{wl.name}/{podset.name}/{node}/{i}",
                        workload=wl.name,
                        team=wl.team,
                        node=node,
                        requests=podset.requests,
                        priority=wl.priority,
                        kind=kind,  # type: ignore[arg-type]
                        preemptible=preemptible,
                        gang=wl.name if wl.pod_count > 1 else None,
                        started_at=offset + entry.admitted_at,
                        node_selector=podset.node_selector,
                        tolerations=podset.tolerations,
                        affinity=podset.affinity,
                        labels=wl.labels,
                        podset=podset.name,
                        domain=level if podset.count > 1 else None,
                        domain_required=required,
                    )
                )
    return out


def _pods_on(running: Mapping[str, Running]) -> dict[str, list[Running]]:
    out: dict[str, list[Running]] = {}
    for entry in running.values():
        for placement in entry.assignment.placement:
            for node, _ in placement:
                bucket = out.setdefault(node, [])
                if not bucket or bucket[-1] is not entry:
                    bucket.append(entry)
    return out


def _take_placed(
    rooms: dict[str, dict[str, int]], running: Iterable[Running]
) -> list[tuple[PodSet, int, str]]:
    """Take what running work's pods request from the room of the nodes they run on (node
    name -> free amounts, changed in place); the (pod set, pods, node) placed on nodes not in
    ``rooms``, in the order met."""
    elsewhere: list[tuple[PodSet, int, str]] = []
    for entry in running:
        for podset, placement in zip(
            entry.workload.podsets, entry.assignment.placement, strict=True
        ):
            for node, count in placement:
                room = rooms.get(node)
                if room is None:
                    elsewhere.append((podset, count, node))
                    continue
                for resource, value in podset.requests.items():
                    room[resource] = room.get(resource, 0) - value * count
    return elsewhere


class Autoscaler:
    """Karpenter-style provisioning and disruption against a (simulated) cloud."""

    def __init__(
        self,
        pools: Sequence[NodePool],
        cloud: CloudProvider,
        catalog: Catalog,
        settings: AutoscalerSpec | None = None,
        *,
        pdbs: Sequence[PdbSpec] = (),
        do_not_disrupt: DoNotDisruptSpec | None = None,
    ) -> None:
        self.pools = {p.name: p for p in pools}
        self.cloud = cloud
        self.catalog = catalog
        self.settings = settings or AutoscalerSpec()
        self.disruption_settings: DisruptionSettings = self.settings.disruption_settings()
        self.pdbs = list(pdbs)
        self.do_not_disrupt: DoNotDisrupt = (do_not_disrupt or DoNotDisruptSpec()).do_not_disrupt()
        self._launchable = [i.name for i in catalog if any(p.allows(i) for p in pools)]
        self.states: StateCache | None = StateCache()
        """Builds each step's governance state from the last one's (None: from scratch, as
        the reference runs do; the same state either way)."""
        """Instance types some pool may launch (pools' type rules do not change)."""
        self._step_views: tuple[list[NodeView], list[PodView]] | None = None
        self._pod_views: dict[str, tuple[Running, list[PodView]]] = {}
        """A running workload's pod views, kept while it runs (they do not change)."""
        """The disruption views of this step's nodes and pods (built once per step)."""
        self._ran: set[str] = set()
        """Workloads that have run: pending again, they count as disrupted for their PDBs."""
        self.nodes: dict[str, ManagedNode] = {}
        self._by_instance: dict[str, str] = {}
        self._seq = 0
        self._batch_start: float | None = None
        self._batch_last = 0.0
        self._seen: set[str] = set()
        self._retry_at: float | None = None
        self._retry_stuck = False
        self.waited_for_nodes: set[str] = set()
        """Workloads that nodes were launched for (for the time-to-capacity metric)."""
        self.short_since: dict[str, float] = {}
        """Workload -> the first step, before its first admission, at which quota would have
        admitted it but no node had room (it was demand): under-provisioning."""
        self.unplaceable: dict[str, str] = {}
        """Workload -> why no pool can run it (latest planning)."""
        self.plans: list[Plan] = []
        self.quota_blocked: dict[str, str] = {}
        """Pending workload -> the quota reason no node is launched for it."""
        self._proposed: tuple[Action, float] | None = None
        """A disruption decided earlier, carried out after re-validation at the given time."""
        self._replacing: list[tuple[Action, tuple[str, ...]]] = []
        """Actions whose replacements are launching: old nodes go once those are Ready."""
        self._next_disruption = 0.0
        self._last_signature: object = None
        self._last_running: Mapping[str, Running] = {}
        self._announced: dict[str, str] = {}
        self._offset = self.settings.clock_start.timestamp()
        self.blocked: dict[str, Reason] = {}
        """Node -> why the latest voluntary disruption pass kept it."""
        self._headroom: list[WarmRoom] = [
            (parse_resources(room.requests), room.count, dict(room.node_selector))
            for room in self.settings.headroom
        ]
        latency = self.cloud.traits.launch_latency_seconds
        self.warm = {
            p.name: WarmPool.of(p.warm_capacity, latency) for p in pools if p.warm_capacity
        }
        """Pools with warm capacity, by name."""
        self._warm_rooms: list[WarmRoom] = []

    # -- bookkeeping ---------------------------------------------------------------------------

    def live(self) -> list[ManagedNode]:
        """Nodes launched and not terminated."""
        return [m for m in self.nodes.values() if m.terminated_at is None]

    def manages(self, name: str) -> bool:
        """The node was launched by this autoscaler (it may be terminated by now)."""
        return name in self.nodes

    def joined(self, name: str) -> bool:
        """The node's launch latency passed: True when it joins the cluster (it was not
        terminated meanwhile)."""
        managed = self.nodes.get(name)
        if managed is None:
            return True
        if managed.terminated_at is not None:
            return False
        managed.joined = True
        return True

    def terminated(self, name: str, now: float, reason: Reason) -> None:
        """The node is gone: terminate its instance (if not already) and record why."""
        managed = self.nodes.get(name)
        if managed is None or managed.terminated_at is not None:
            return
        managed.terminated_at = now
        managed.termination_reason, managed.termination_category = reason.message, reason.category
        self.cloud.terminate([managed.instance.id], now)
        if not self._retry_stuck:  # room under the pool's limits: plan stuck work again
            self._retry_stuck = True
            self._seen -= set(self.unplaceable)  # fresh again: a plan is made for them

    def set_pools(self, pools: Sequence[NodePool]) -> None:
        """The pools changed (the operator's NodePool objects): decide with these from now
        on. A pool that is gone but still has nodes is kept with a limit of zero nodes (it
        launches nothing) until emptiness or consolidation has removed them."""
        new = {p.name: p for p in pools}
        for name in dict.fromkeys(m.pool for m in self.live()):
            old = self.pools.get(name)
            if name not in new and old is not None:
                new[name] = old.model_copy(update={"limits": {**old.limits, NODES: "0"}})
        self.pools = new
        self._launchable = [i.name for i in self.catalog if any(p.allows(i) for p in pools)]
        self._last_signature = None
        self._seen.clear()  # pending work is planned again under the new pools

    def adopt(self, name: str, instance: Instance, reason: str, *, joined: bool) -> bool:
        """Take over a node launched before a restart (the operator's NodeClaims and the
        service's store remember it): managed again, consolidated, expired or interrupted
        like any other; later launches do not reuse its name. False when its pool is
        unknown or the name is taken (the caller removes it)."""
        pool = self.pools.get(instance.pool)
        if pool is None or name in self.nodes:
            return False
        managed = self._managed(instance, pool, reason, (), name)
        managed.joined = joined
        return True

    def kept(self, name: str, reason: Reason) -> None:
        """The backend could not remove ``name`` (its drain was refused): it stays, and the
        next disruption pass looks at it again."""
        self.blocked[name] = reason
        self._last_signature = None

    def retry_due(self) -> bool:
        """Work no node could be bought for waits, and a node went away since: planning it
        again now may succeed (room under a pool or account limit)."""
        return self._retry_stuck and bool(self.unplaceable)

    def note(self, workload: str) -> AutoscalerNote | None:
        """What the autoscaler is doing about a pending workload, for "why pending"."""
        return self.notes([workload]).get(workload)

    def notes(self, workloads: Iterable[str]) -> dict[str, AutoscalerNote]:
        """:meth:`note` of each workload that has one, in one pass over the launching nodes."""
        groups = self._launching_groups()
        launching: dict[str, list[tuple[list[ManagedNode], float]]] = {}
        for names, nodes in groups:
            group = (nodes, max(m.ready_at for m in nodes))
            for name in names:
                launching.setdefault(name, []).append(group)
        out = {}
        for workload in workloads:
            note = self._note(workload, launching.get(workload, ()))
            if note is not None:
                out[workload] = note
        return out

    def _note(
        self, workload: str, launching: Sequence[tuple[list[ManagedNode], float]]
    ) -> AutoscalerNote | None:
        if launching:
            ready = max(at for _, at in launching)
            count = sum(len(nodes) for nodes, _ in launching)
            shown = [m.name for nodes, _ in launching for m in nodes[:SHOWN_NODES]][:SHOWN_NODES]
            return AutoscalerNote("launching", tuple(shown), count, ready)
        reason = self.unplaceable.get(workload)
        if reason is not None:
            return AutoscalerNote("cannot-add", reason=reason)
        reason = self.quota_blocked.get(workload)
        if reason is not None:
            return AutoscalerNote("quota-blocked", reason=reason)
        return None

    def _launching_groups(self) -> list[tuple[tuple[str, ...], list[ManagedNode]]]:
        """Launching nodes grouped by the workloads they were launched for. The nodes of one
        plan share one tuple of (often thousands of) workloads: walking it once per plan, not
        once per node, keeps notes, nominations and free room linear (per node, a burst of
        7,000 DLRM jobs on 1,000 new nodes took minutes per step)."""
        groups: dict[int, tuple[tuple[str, ...], list[ManagedNode]]] = {}
        for managed in self.live():
            if not managed.joined:
                key = id(managed.for_workloads)
                groups.setdefault(key, (managed.for_workloads, []))[1].append(managed)
        return list(groups.values())

    def _nominated(self) -> set[str]:
        return {w for names, _ in self._launching_groups() for w in names}

    # -- the step ------------------------------------------------------------------------------

    def step(
        self,
        now: float,
        engine: Engine,
        nodes: Mapping[str, Node],
        running: Mapping[str, Running],
        pending: Sequence[Workload],
    ) -> Step:
        """One pass of the control loop at ``now`` (see the module docstring)."""
        out = Step()
        self._last_running = running
        self._step_views = None
        self._ran.update(running)
        pods = _pods_on(running)
        self._observe(now, nodes, pods, out)
        self._repair(now, running, pending, out)
        snapshot = Snapshot(now, list(nodes.values()), list(running.values()), list(pending))
        self._provision(now, engine, snapshot, out)
        self._schedules(now, pods, out)
        self._finish_replacements(now, out)
        self._step_views = None  # provisioning and replacements nominated nodes' room
        self._emptiness(now, running, pending, out)
        self._disrupt(now, running, pending, out)
        return out

    def _observe(
        self, now: float, nodes: Mapping[str, Node], pods: Mapping[str, list[Running]], out: Step
    ) -> None:
        for managed in self.live():
            interrupt = self.cloud.interruption_at(managed.instance.id)
            if interrupt is not None:
                if interrupt <= now:
                    out.removals.append((managed.name, removal("spot-interruption")))
                    continue
                out.wake_if_busy.append(interrupt)
            if not managed.joined:
                continue
            node = nodes.get(managed.name)
            if node is None:
                continue
            healthy = node.ready and node.healthy
            if healthy:
                managed.unhealthy_since = None
            elif managed.unhealthy_since is None:
                managed.unhealthy_since = now
            here = frozenset(r.workload.name for r in pods.get(managed.name, ()))
            if here != managed.pods_seen:
                managed.pods_seen, managed.pods_changed_at = here, now
            if here:
                managed.empty_since = None
            elif managed.empty_since is None:
                managed.empty_since = now

    def _repair(
        self, now: float, running: Mapping[str, Running], pending: Sequence[Workload], out: Step
    ) -> None:
        """Unhealthy nodes go after the repair grace (:data:`REPAIR`, whose one rule pauses a
        pool where too many nodes are unhealthy at once); their work was requeued when they
        failed and provisioning replaces the capacity it needs."""
        if not any(m.joined and m.unhealthy_since is not None for m in self.live()):
            return  # no unhealthy node: nothing to repair (and no snapshot to build)
        removing = {name for name, _ in out.removals}
        state = self._state(now, running, pending, removing, removing, offerings=False)
        decision = decide(state, (REPAIR,))
        for action in decision.actions:
            out.removals.extend((name, removal("repair", action.reason)) for name in action.nodes)
        for node, reason in sorted(decision.reasons.items()):
            if reason.category == "repair-halted" and self._announced.get(node) != str(reason):
                self._announced[node] = str(reason)
                out.log.append(
                    {
                        "event": "autoscaler",
                        "action": "repair-paused",
                        "node": node,
                        "reason": str(reason),
                    }
                )
        out.wake.extend(_due(now, decision.reasons))

    # -- provisioning ----------------------------------------------------------------------

    def _provision(self, now: float, engine: Engine, snapshot: Snapshot, out: Step) -> None:
        if self._retry_at is not None and now >= self._retry_at:
            self._retry_at = None  # offerings that ran out of capacity are offered again
            self._seen.clear()
        waiting = {wl.name for wl in snapshot.pending}
        self.unplaceable = {w: r for w, r in self.unplaceable.items() if w in waiting}
        # Work no node can be bought for holds no quota on paper, so it does not block the
        # work behind it; it is tried again when a node goes away or a retry is due.
        stuck = set() if self._retry_stuck else set(self.unplaceable)
        demand, self.quota_blocked = admissible_demand(
            engine, snapshot, self._nominated(), stuck, self.states
        )
        for item in demand:
            name = item.workload.name
            if name not in self._ran and name not in self.short_since:
                self.short_since[name] = now
        self._keep_warm(now, snapshot, demand, out)
        names = {d.workload.name for d in demand}
        fresh = names - self._seen
        self._seen &= names
        if not demand:
            self._batch_start = None
            if self._rooms() and self._headroom_shapes(self._free(snapshot)):
                self._plan_and_launch(now, [], self._free(snapshot), out)
            return
        if fresh:
            self._seen |= fresh
            self._batch_last = now
            if self._batch_start is None:
                self._batch_start = now
        if self._batch_start is None:
            # nothing new since the last plan: those workloads wait for what it launched
            if self._warm_rooms and self._headroom_shapes(self._free(snapshot)):
                self._plan_and_launch(now, [], self._free(snapshot), out)
            return
        due = min(
            self._batch_start + self.settings.batch_max_seconds,
            self._batch_last + self.settings.batch_idle_seconds,
        )
        if due > now:
            out.wake.append(due)
            return
        self._batch_start = None
        self._plan_and_launch(now, demand, self._free(snapshot), out)

    def _free(self, snapshot: Snapshot) -> list[Room]:
        """Room on Ready nodes and on nodes still launching (less what they were launched
        for): demand that fits there needs no new node."""
        out: list[Room] = []
        room = {n.name: dict(n.allocatable) for n in snapshot.nodes if n.schedulable}
        _take_placed(room, snapshot.running)
        out = [Room.of(n, room[n.name]) for n in snapshot.nodes if n.name in room]
        launching = [Room.of(m.node) for m in self.live() if not m.joined]
        pending = {wl.name: wl for wl in snapshot.pending}
        for name in dict.fromkeys(w for names, _ in self._launching_groups() for w in names):
            wl = pending.get(name)  # each workload once, however many nodes it waits for
            if wl is not None:
                for podset in wl.podsets:
                    _first_fit(podset, podset.node_selector, podset.count, launching)
        return out + launching

    def _shapes(
        self,
        demand: Sequence[Demand],
        free: list[Room] | None = None,
        used: set[str] | None = None,
    ) -> list[PodShape]:
        grouped: dict[tuple[object, ...], PodShape] = {}
        full: set[tuple[object, ...]] = set()  # pod kinds that found no room left: room
        # only shrinks here, so they never will (thousands of pods no node takes were each
        # tried on every room)
        for item in demand:
            # A workload is admitted whole, so its pods are bought whole: nodes for part of a
            # gang would sit idle (and be consolidated away, and bought again, ...).
            pods = sum(podset.count for podset in item.workload.podsets)
            gang = item.workload.name if pods > 1 else None
            for podset, flavor_selector in zip(
                item.workload.podsets, item.node_selectors, strict=True
            ):
                selector = {**podset.node_selector, **flavor_selector}
                count = podset.count
                level, required = constraint(podset.required_topology, podset.preferred_topology)
                kind = (
                    tuple(sorted(podset.requests.items())),
                    tuple(sorted(selector.items())),
                    podset.tolerations,
                    podset.affinity,
                    # pods kept in one domain place differently: a kind of their own
                    (level, required) if level and gang else None,
                )
                if free and kind not in full:
                    placed = _first_fit(podset, selector, count, free, used)
                    if placed < count:
                        full.add(kind)
                    count -= placed
                if count <= 0:
                    continue
                # a gang's pod set kept in one domain is a shape of its own
                key = (*kind, gang, podset.name if level and gang else None)
                old = grouped.get(key)
                grouped[key] = PodShape(
                    requests=key[0],
                    count=(old.count if old else 0) + count,
                    node_selector=key[1],
                    tolerations=podset.tolerations,
                    affinity=podset.affinity,
                    workloads=(*(old.workloads if old else ()), item.workload.name),
                    gang=gang,
                    domain=level if gang else None,
                    domain_required=required,
                )
        return list(grouped.values())

    def _offerings(self, now: float) -> list[Any]:
        """Offerings of every type some pool may launch (in catalog order)."""
        return self.cloud.offerings(self._launchable, now)

    def _open_pools(self, now: float) -> list[NodePool]:
        """The pools as they stand now: a pool's node limit tightened to its current ceiling
        (instance-group maximums, schedules), so the planner keeps within it and says which
        limit keeps work from getting nodes."""
        out = []
        for pool in self.pools.values():
            ceiling = self._bounds(pool, now)[1]
            limit = pool.limit_of(NODES)
            if ceiling is not None and (limit is None or ceiling < limit // 1000):
                pool = pool.model_copy(update={"limits": {**pool.limits, NODES: ceiling}})
            out.append(pool)
        return out

    def _pool_usage(self) -> dict[str, dict[str, int]]:
        return pool_usage((m.pool, m.node.allocatable) for m in self.live())

    def _plan_and_launch(
        self,
        now: float,
        demand: Sequence[Demand],
        free: list[Room],
        out: Step,
    ) -> None:
        used: set[str] = set()
        shapes = self._shapes(demand, free, used)
        self._hold(used, now)
        shapes += self._headroom_shapes(free)
        if not shapes:
            return
        if self._retry_stuck:  # a fresh try for stuck work: what this plan leaves out is free
            self._retry_stuck = False
            tried = {w for shape in shapes for w in shape.workloads}
            self.unplaceable = {w: r for w, r in self.unplaceable.items() if w in tried}
        for _ in range(MAX_REPLANS):
            pools = self._open_pools(now)
            plan = plan_nodes(
                shapes,
                pools,
                self.catalog,
                self._offerings(now),
                pool_usage=self._pool_usage(),
                time_limit=self.settings.plan_time_limit_seconds,
                account_limits=self.cloud.traits.account,
                running_instances=self.cloud.instances(now),
            )
            self.plans.append(plan)
            planned = [
                w
                for i, s in enumerate(shapes)
                if i not in plan.unplaceable and not s.headroom
                for w in s.workloads
            ]
            for w in planned:
                self.unplaceable.pop(w, None)
            stuck = {
                w: reason
                for i, reason in plan.unplaceable.items()
                if not shapes[i].headroom
                for w in shapes[i].workloads
            }
            if stuck.keys() - self.unplaceable.keys():
                out.wake.append(now + max(1.0, self.settings.batch_idle_seconds))  # free quota
            self.unplaceable.update(stuck)
            allowed = self._within_limits(plan.launches, now)
            if len(allowed) < len(plan.launches) or any(
                a.count != b.count for a, b in zip(allowed, plan.launches, strict=False)
            ):
                out.log.append(
                    {
                        "event": "autoscaler",
                        "action": "trimmed",
                        "reason": "the plan went past a pool limit or ceiling",
                    }
                )
            if not allowed:
                return
            failed = self._launch(now, allowed, "provisioning", tuple(planned), out)
            if not failed:
                out.log.append(
                    {
                        "event": "autoscaler",
                        "action": "plan",
                        "hourly_cost": round(plan.hourly_cost, 4),
                        "lower_bound": round(plan.lower_bound, 4),
                        "method": plan.method,
                        "workloads": len(planned),
                    }
                )
                return
            # some offerings had no capacity: the cloud marked them unavailable; re-plan what
            # the launched nodes do not cover (conservatively: everything not yet nominated)
            nominated = self._nominated()
            demand = [d for d in demand if d.workload.name not in nominated]
            shapes = self._shapes(demand, free) + self._headroom_shapes(free)
            if not shapes:
                return

    def _rooms(self) -> list[WarmRoom]:
        """The room to keep free: the configured headroom and the pools' warm capacity."""
        return self._headroom + self._warm_rooms

    def _headroom_shapes(self, free: list[Room]) -> list[PodShape]:
        """Headroom pods that do not fit in ``free`` (taken as they fit): what to launch to
        keep the configured headroom and warm capacity."""
        out = []
        for requests, count, selector in self._rooms():
            podset = PodSet("headroom", count, requests, selector)
            missing = count - _first_fit(podset, selector, count, free)
            if missing > 0:
                out.append(
                    PodShape(
                        requests=tuple(sorted(requests.items())),
                        count=missing,
                        node_selector=tuple(sorted(selector.items())),
                        headroom=True,
                    )
                )
        return out

    def _keep_warm(
        self, now: float, snapshot: Snapshot, demand: Sequence[Demand], out: Step
    ) -> None:
        """Observe each warm pool's demand (:mod:`fleetshare.autoscaling.warm`: the resource
        of the pods on its nodes and of the admissible pending pods it would launch for, each
        pending pod counted for the first pool that serves it) and set the warm room to keep
        ahead of its forecast."""
        if not self.warm:
            return
        amount = dict.fromkeys(self.warm, 0)
        for entry in snapshot.running:
            for podset, placement in zip(
                entry.workload.podsets, entry.assignment.placement, strict=True
            ):
                for node, count in placement:
                    managed = self.nodes.get(node)
                    if managed is not None and managed.pool in amount:
                        resource = self.warm[managed.pool].setting.resource
                        amount[managed.pool] += podset.requests.get(resource, 0) * count
        for item in demand:
            for podset, flavor in zip(item.workload.podsets, item.node_selectors, strict=True):
                selector = {**podset.node_selector, **flavor}
                for name in amount:
                    if _serves(self.pools[name], selector):
                        resource = self.warm[name].setting.resource
                        amount[name] += podset.requests.get(resource, 0) * podset.count
                        break
        rooms: list[WarmRoom] = []
        for name, warm in self.warm.items():
            setting = warm.setting
            value = amount[name] / MILLI
            warm.observe(now, value)
            forecast = warm.forecaster.forecast(now, setting.horizon(warm.latency))
            target = warm.target(now, forecast.upper)
            unit = setting.unit()
            pods = warm_pods(target, value, unit[setting.resource] / MILLI)
            if pods:
                rooms.append((unit, pods, {POOL_LABEL: name}))
            if pods != warm.pods:
                warm.pods = pods
                out.log.append(
                    {
                        "event": "autoscaler",
                        "action": "warm",
                        "pool": name,
                        "demand": round(value, 3),
                        "forecast": round(forecast.upper, 3),
                        "method": forecast.method,
                        "target": round(target, 3),
                        "pods": pods,
                    }
                )
            step = setting.step_seconds
            out.wake_if_busy.append((math.floor(now / step) + 1) * step)
        self._warm_rooms = rooms

    def _hold(self, names: set[str], now: float) -> None:
        """Nodes whose room pending work counts on are not removed as empty meanwhile
        (until the nodes launched with them are up, plus the pool's consolidate-after)."""
        latency = self.cloud.traits.launch_latency_seconds
        for name in names:
            managed = self.nodes.get(name)
            if managed is not None:
                after = self.pools[managed.pool].disruption.consolidate_after_seconds
                managed.held_until = max(managed.held_until, now + latency + after)

    def _within_limits(self, launches: Sequence[Launch], now: float) -> list[Launch]:
        """The launches, cut where they would pass a pool's limits or ceiling (a last check
        before spending money, whatever the planner said)."""
        usage = self._pool_usage()
        out = []
        for launch in launches:
            pool = self.pools[launch.pool]
            ceiling = self._bounds(pool, now)[1]
            allocatable = self.catalog.get(launch.instance_type).allocatable
            mine = usage.setdefault(pool.name, {NODES: 0})
            count = 0
            for _ in range(launch.count):
                if ceiling is not None and mine[NODES] >= ceiling:
                    break
                if limit_passed(pool, mine, allocatable) is not None:
                    break
                count += 1
                add_node(mine, allocatable)
            if count:
                out.append(replace(launch, count=count))
        return out

    def _launch(
        self,
        now: float,
        launches: Sequence[Launch],
        reason: str,
        workloads: tuple[str, ...],
        out: Step,
    ) -> bool:
        """Launch; True when some launch hit insufficient capacity."""
        failed = False
        for launch in launches:
            pool = self.pools[launch.pool]
            request = LaunchRequest(
                instance_type=launch.instance_type,
                zone=launch.zone,
                capacity_type=launch.capacity_type,  # type: ignore[arg-type]
                count=launch.count,
                pool=launch.pool,
                labels=dict(pool.labels),
                taints=tuple((t.key, t.value, t.effect) for t in pool.taints),
            )
            try:
                instances = self.cloud.launch(request, now)
            except InsufficientCapacityError as exc:
                failed = True
                self._retry_at = now + self.cloud.traits.ice_cooldown_seconds
                out.wake.append(self._retry_at)
                out.log.append(
                    {
                        "event": "autoscaler",
                        "action": "ice",
                        "instance_type": exc.instance_type,
                        "zone": exc.zone,
                        "capacity_type": exc.capacity_type,
                        "message": str(exc),
                    }
                )
                continue
            except AccountLimitError as exc:  # the plan kept within the limits it knew
                failed = True
                out.log.append(
                    {"event": "autoscaler", "action": "account-limit", "message": str(exc)}
                )
                continue
            if len(instances) < launch.count:
                failed = True
            for instance in instances:
                managed = self._managed(instance, pool, reason, workloads)
                out.joins.append((managed.ready_at, managed.node))
                out.log.append(
                    {
                        "event": "launch",
                        "node": managed.name,
                        "pool": pool.name,
                        "instance_type": instance.instance_type,
                        "zone": instance.zone,
                        "capacity_type": instance.capacity_type,
                        "price_per_hour": round(instance.price_per_hour, 6),
                        "reason": reason,
                    }
                )
        self.waited_for_nodes.update(workloads)
        return failed

    def _managed(
        self,
        instance: Instance,
        pool: NodePool,
        reason: str,
        workloads: tuple[str, ...],
        name: str | None = None,
    ) -> ManagedNode:
        inst = self.catalog.get(instance.instance_type)
        if name is None:
            self._seq += 1
            name = f"{pool.name}-{inst.name}-{self._seq}"
            while name in self.nodes:  # taken by a node adopted after a restart
                self._seq += 1
                name = f"{pool.name}-{inst.name}-{self._seq}"
        node = Node(
            name=name,
            allocatable=dict(inst.allocatable),
            instance_type=inst.name,
            zone=instance.zone,
            labels=launch_labels(pool, inst, instance.zone, instance.capacity_type),
            taints=pool_taints(pool),
            capacity_type=instance.capacity_type,
        )
        ready_at = instance.ready_at
        if ready_at is None:  # the provider cannot tell: expect its usual latency
            ready_at = instance.launched_at + self.cloud.traits.launch_latency_seconds
        managed = ManagedNode(
            name, instance, pool.name, reason, node, for_workloads=workloads, ready_at=ready_at
        )
        self.nodes[name] = managed
        self._by_instance[instance.id] = name
        return managed

    # -- schedules and scale-down ----------------------------------------------------------

    def _bounds(self, pool: NodePool, now: float) -> tuple[int | None, int | None]:
        """The pool's (floor, ceiling) at ``now``: instance-group minimums and maximums, and
        the tightest active schedules."""
        floor: int | None = None
        ceiling: int | None = None
        if pool.instance_groups:
            floor = sum(g.min_count for g in pool.instance_groups) or None
            ceiling = sum(g.max_count for g in pool.instance_groups)
        nodes_limit = pool.limit_of("nodes")
        if nodes_limit is not None:
            ceiling = min(ceiling if ceiling is not None else math.inf, nodes_limit // 1000)  # type: ignore[assignment]
        start = self.settings.clock_start
        for rule in pool.schedules:
            if not window_active(rule.schedule, rule.duration_seconds, now, start):
                continue
            if rule.min_nodes is not None:
                floor = max(floor or 0, rule.min_nodes)
            if rule.max_nodes is not None:
                ceiling = rule.max_nodes if ceiling is None else min(ceiling, rule.max_nodes)
        return floor, ceiling

    def _count(self, pool: str) -> int:
        return sum(1 for m in self.live() if m.pool == pool)

    def _floor_type(self, pool: NodePool, now: float) -> str | None:
        for rule in pool.schedules:
            start = self.settings.clock_start
            if rule.instance_type and window_active(
                rule.schedule, rule.duration_seconds, now, start
            ):
                return ec2_name(rule.instance_type)
        allowed = [i for i in self.catalog if pool.allows(i) and i.price_per_hour is not None]
        return min(allowed, key=lambda i: i.price_per_hour or 0.0).name if allowed else None

    def _schedules(self, now: float, pods: Mapping[str, list[Running]], out: Step) -> None:
        start = self.settings.clock_start
        removing = {name for name, _ in out.removals}
        for pool in self.pools.values():
            for rule in pool.schedules:
                change = next_change(rule.schedule, rule.duration_seconds, now, start)
                out.wake_if_busy.append(change)
            floor, ceiling = self._bounds(pool, now)
            members = [m for m in self.live() if m.pool == pool.name and m.name not in removing]
            count = len(members)
            for group in pool.instance_groups:  # each group keeps its own minimum
                have = sum(
                    1 for m in members if m.instance.instance_type == ec2_name(group.instance_type)
                )
                if have < group.min_count:
                    why = f"instance group {group.name} minimum of {group.min_count}"
                    count += self._launch_floor(
                        now, pool, ec2_name(group.instance_type), group.min_count - have, why, out
                    )
            if floor is not None and count < floor:
                instance_type = self._floor_type(pool, now)
                if instance_type is not None:
                    why = f"scheduled floor of {floor}"
                    self._launch_floor(now, pool, instance_type, floor - count, why, out)
            if ceiling is not None and count > ceiling:
                empty = sorted(
                    (m for m in self.live() if m.pool == pool.name and not pods.get(m.name)),
                    key=lambda m: -m.instance.price_per_hour,
                )
                for managed in empty[: count - ceiling]:
                    if managed.name not in removing:
                        why = f"above the pool's ceiling of {ceiling}"
                        out.removals.append((managed.name, removal("ceiling", why)))
                        removing.add(managed.name)

    def _launch_floor(
        self, now: float, pool: NodePool, instance_type: str, count: int, why: str, out: Step
    ) -> int:
        """Launch ``count`` nodes of one type for a floor, at its cheapest offering the pool
        takes; how many were asked for (0 when none is offered)."""
        offers = [
            o
            for o in self.cloud.offerings([instance_type], now)
            if o.available
            and o.capacity_type in pool.capacity_types
            and (not pool.zones or o.zone in pool.zones)
        ]
        if not offers:
            return 0
        best = min(offers, key=lambda o: (o.price_per_hour, o.zone))
        launch = Launch(
            pool.name, best.instance_type, best.zone, best.capacity_type, count, best.price_per_hour
        )
        self._launch(now, [launch], why, (), out)
        return count

    def _headroom_without(self, name: str, removing: set[str]) -> bool:
        """True when the configured headroom and warm capacity still fit once ``name`` (and
        ``removing``) are gone and the pods on them have moved into the room left."""
        if not self._rooms():
            return True
        gone = removing | {name}
        free = [Room.of(m.node) for m in self.live() if m.name not in gone]
        rooms = {room.name: room.free for room in free}
        elsewhere = _take_placed(rooms, self._last_running.values())
        for podset, count, node in elsewhere:
            if node in gone:  # the pods on the nodes removed move into the room left
                _first_fit(podset, podset.node_selector, count, free)
        return not self._headroom_shapes(free)

    def _emptiness(
        self, now: float, running: Mapping[str, Running], pending: Sequence[Workload], out: Step
    ) -> None:
        """Nodes empty for their pool's consolidate-after go (:data:`EMPTINESS`: down to the
        floor, within budgets, not annotated do-not-disrupt, not nominated), at every step; a
        node the configured headroom still needs stays."""
        if not any(m.joined and not m.pods_seen for m in self.live()):
            return  # no empty node: nothing to remove (and no snapshot to build)
        removing = {name for name, _ in out.removals}
        disrupting = removing | {n for action, _ in self._replacing for n in action.nodes}
        state = self._state(now, running, pending, removing, disrupting, offerings=False)
        decision = decide(state, (EMPTINESS,))
        removed = False
        needed: set[tuple[str, ...]] = set()
        """Kinds of empty node the headroom needs: another of the same kind is needed too
        (taking more nodes away never makes room), so it is not checked again."""
        for action in decision.actions:
            for name in action.nodes:
                inst = self.nodes[name].instance
                kind = (self.nodes[name].pool, inst.instance_type, inst.zone, inst.capacity_type)
                if kind in needed:
                    continue
                if self._headroom_without(name, removing):
                    out.removals.append((name, removal("empty")))
                    removing.add(name)
                    removed = True
                else:
                    needed.add(kind)
        budget_bound = any(r.category == "budget" for r in decision.reasons.values())
        out.again = out.again or (removed and budget_bound)
        out.wake.extend(_due(now, decision.reasons))

    # -- consolidation, expiry and drift -------------------------------------------------------

    def _state(
        self,
        now: float,
        running: Mapping[str, Running],
        pending: Sequence[Workload],
        exclude: set[str],
        disrupting: set[str],
        *,
        offerings: bool = True,
    ) -> State:
        """What the disruption methods see at ``now`` (on the wall clock, for cron budgets):
        the Ready nodes but ``exclude``, their pods, the settings, PDBs with the pods they have
        lost, do-not-disrupt, floors and (for methods that buy replacements) offerings."""
        if self._step_views is None:
            self._step_views = self._views(running, set())
        nodes, pods = self._step_views
        if exclude:
            nodes = [n for n in nodes if n.name not in exclude]
        return State(
            nodes,
            pods,
            list(self.pools.values()),
            now + self._offset,
            disrupting=disrupting,
            pdbs=self._pdbs(pending) if self.pdbs else (),
            settings=self.disruption_settings,
            floors=self._floors(now),
            do_not_disrupt=self.do_not_disrupt,
            catalog=self.catalog,
            offerings=self._offerings(now) if offerings and nodes else (),
        )

    def _pdbs(self, pending: Sequence[Workload]) -> list[Pdb]:
        """The PDBs, each with the pods it covers that ran and now wait (disrupted)."""
        out = []
        for spec in self.pdbs:
            disrupted = sum(
                wl.pod_count
                for wl in pending
                if wl.name in self._ran
                and (
                    wl.name in spec.workloads
                    or (
                        bool(spec.selector)
                        and all(wl.labels.get(k) == v for k, v in spec.selector.items())
                    )
                )
            )
            out.append(spec.pdb(disrupted))
        return out

    def _views(
        self, running: Mapping[str, Running], exclude: set[str]
    ) -> tuple[list[NodeView], list[PodView]]:
        """The disruption logic's view of the autoscaler's Ready nodes and their pods, on the
        wall clock (cron budgets)."""
        t = self._offset
        nodes = []
        for m in self.live():
            if not m.joined or m.name in exclude:
                continue
            nodes.append(
                NodeView(
                    name=m.name,
                    pool=m.pool,
                    instance_type=m.instance.instance_type,
                    zone=m.instance.zone,
                    capacity_type=m.instance.capacity_type,
                    price_per_hour=m.instance.price_per_hour,
                    allocatable=m.node.allocatable,
                    launched_at=t + m.instance.launched_at,
                    ready=m.node.ready,
                    healthy=m.unhealthy_since is None,
                    unhealthy_since=None if m.unhealthy_since is None else t + m.unhealthy_since,
                    empty_since=None if m.empty_since is None else t + m.empty_since,
                    labels=m.node.labels,
                    taints=m.node.taints,
                    pods_changed_at=None if m.pods_changed_at is None else t + m.pods_changed_at,
                    nominated_until=t + m.held_until if m.held_until > 0 else None,
                )
            )
        names = {n.name for n in nodes}
        cache: dict[str, tuple[Running, list[PodView]]] = {}
        pods: list[PodView] = []
        for name, entry in running.items():
            found = self._pod_views.get(name)
            if found is None or found[0] is not entry:
                found = (entry, _pod_views(entry, t))
            cache[name] = found
            pods.extend(p for p in found[1] if p.node in names)
        self._pod_views = cache
        return nodes, pods

    def _floors(self, now: float) -> dict[str, int]:
        return {
            name: floor
            for name, pool in self.pools.items()
            if (floor := self._bounds(pool, now)[0] or 0)
        }

    def _disrupt(
        self, now: float, running: Mapping[str, Running], pending: Sequence[Workload], out: Step
    ) -> None:
        """Carry out a re-validated proposal; otherwise, every ``disruption_interval_seconds``,
        walk expiration, drift, multi-node and single-node consolidation (:data:`VOLUNTARY`)
        for the next action (one at a time, as Karpenter does). Expiry and drift are acted on
        at once; a consolidation is proposed and re-validated ``disruption_validation_seconds``
        later."""
        removing = {name for name, _ in out.removals}
        disrupting = {n for action, _ in self._replacing for n in action.nodes} | removing
        if self._proposed is not None:
            action, due = self._proposed
            if due > now:
                out.wake_if_busy.append(due)
                return
            self._proposed = None
            state = self._state(now, running, pending, removing, disrupting - set(action.nodes))
            check = validate(state, action)
            if not check.valid:
                out.log.append(
                    {"event": "autoscaler", "action": "cancelled", "reason": check.reason}
                )
                return
            self._act(now, action, out)
            return
        if self._replacing or now < self._next_disruption:
            if not self._replacing:
                out.wake_if_busy.append(self._next_disruption)
            return
        self._next_disruption = now + self.settings.disruption_interval_seconds
        if not any(m.joined and m.name not in removing for m in self.live()):
            return
        signature = (
            frozenset((m.name, m.pods_seen) for m in self.live()),
            frozenset(disrupting),
        )
        time_bound = any(r.category in TIME_BOUND for r in self.blocked.values())
        if signature == self._last_signature and not time_bound and not self._expiring():
            return  # nothing changed since a pass that found nothing to do
        self._last_signature = signature
        state = self._state(now, running, pending, removing, disrupting)
        decision = decide(state, VOLUNTARY)
        for node, reason in sorted(decision.reasons.items()):
            if reason.category in ANNOUNCED and self._announced.get(node) != str(reason):
                self._announced[node] = str(reason)
                out.log.append(
                    {"event": "autoscaler", "action": "kept", "node": node, "reason": str(reason)}
                )
        self.blocked = dict(decision.reasons)
        out.wake_if_busy.append(self._next_disruption)
        if not decision.actions:
            return
        action = decision.actions[0]
        forced_by_time = action.kind in ("expire", "drift")
        if not forced_by_time and not self._headroom_without(
            action.nodes[0], removing | set(action.nodes)
        ):
            keep = Reason("headroom", "headroom: keeps the warm room")
            self.blocked.update(dict.fromkeys(action.nodes, keep))
            return
        if forced_by_time:
            self._act(now, action, out)  # forced by time, not a judgement on the moment
            return
        due = now + self.settings.disruption_validation_seconds
        self._proposed = (action, due)
        out.wake_if_busy.append(due)

    def _expiring(self) -> bool:
        return any(p.disruption.expire_after_seconds is not None for p in self.pools.values())

    def _act(self, now: float, action: Action, out: Step) -> None:
        out.log.append(
            {
                "event": "autoscaler",
                "action": action.kind,
                "nodes": list(action.nodes),
                "saving_per_hour": round(action.saving_per_hour, 4),
                "reason": action.reason,
            }
        )
        if not action.replacements:
            for name in action.nodes:
                out.removals.append((name, action_removal(action)))
            return
        before = set(self.nodes)
        launches = [
            Launch(r.pool, r.instance_type, r.zone, r.capacity_type, r.count, r.price_per_hour)
            for r in action.replacements
        ]
        self._launch(now, launches, f"{action.kind} of {', '.join(action.nodes)}", (), out)
        new = tuple(sorted(set(self.nodes) - before))
        if new:
            self._replacing.append((action, new))

    def _finish_replacements(self, now: float, out: Step) -> None:
        waiting = []
        for action, new in self._replacing:
            launched = [self.nodes[n] for n in new]
            if any(m.terminated_at is not None for m in launched):
                out.log.append(
                    {
                        "event": "autoscaler",
                        "action": "cancelled",
                        "reason": f"a replacement for {', '.join(action.nodes)} was lost",
                    }
                )
                continue
            if all(m.joined for m in launched):
                for managed in launched:  # the moved pods land there: not "empty" meanwhile
                    after = self.pools[managed.pool].disruption.consolidate_after_seconds
                    managed.held_until = max(managed.held_until, now + max(after, REPLACE_GRACE))
                for name in action.nodes:
                    if name in self.nodes and self.nodes[name].terminated_at is None:
                        out.removals.append((name, action_removal(action)))
                continue
            waiting.append((action, new))
        self._replacing = waiting
