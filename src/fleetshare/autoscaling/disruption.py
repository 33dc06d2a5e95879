"""Disruption decisions: emptiness, consolidation, expiration, drift and repair (pure functions).

Karpenter-like, but better at protecting training. Every function takes a snapshot of the
cluster (:class:`NodeView`, :class:`PodView`, :class:`Pdb`, the pools) and ``now`` (epoch
seconds); nothing reads a clock or does I/O. Each returns a :class:`Decision`: the
:class:`Action` objects to carry out, and ``blocked``, a reason for every node that was
considered and kept (this answers "why wasn't my node consolidated?"). Reasons start with a
category word and a colon: ``budget``, ``do-not-disrupt``, ``pdb``, ``training``,
``consolidate-after``, ``policy``, ``not-ready``, ``disrupting``, ``floor``, ``does-not-fit``,
``no-saving``, ``unknown-pool``, ``not-evaluated``, ``repair-grace``, ``repair-halted``,
``no-replacement``.

The controller calls, per pass: :func:`repair` (always), then :func:`empty_nodes`, then
:func:`expiration_and_drift`, then :func:`consolidation`, acting on the first method that
returns actions; before acting on a voluntary action (after Karpenter's 15 s wait) it calls
:func:`revalidate` with the then-current state.

Decisions and their precise meaning:

- **Pods and gangs.** A pod with ``gang`` set belongs to a gang: evicting any of its pods
  disrupts the whole gang, so every action evicts all pods of every gang it touches, also those
  on nodes it keeps (they appear in ``Action.evict``; the gang appears in ``Action.requeue``).
  Set ``gang=None`` for independent replicas (e.g. an inference Deployment) so they move one by
  one under Karpenter's rules (do-not-disrupt, PDBs).
- **Which nodes can take the pods.** Ready and healthy nodes that are not being disrupted and
  are not removed by the action, whose labels match the pod's node selector (the well-known
  instance-type, zone, capacity-type and node-pool labels are implied) and whose taints the pod
  tolerates. Each pod also uses one of the node's ``pods`` slots. Pods are placed first fit in
  decreasing size order (accelerators, then CPU, then memory); target nodes by name, planned
  replacement nodes last. Consolidation requires *every* evicted pod (gang members included) to
  be re-placeable; it never evicts a gang into the queue to save money.
- **Training protection.** A training unit is a gang containing a ``kind="training"`` pod (or a
  lone training pod). Consolidation disrupts one only when all of its pods are ``preemptible``
  *and* the action's hourly saving (removed nodes' prices minus replacements' prices) is at
  least ``settings.training_saving_threshold`` (default 0.3) times the summed hourly price of
  every node the action *touches*: the nodes it removes plus the nodes hosting any pod it
  evicts. Drift waits for non-preemptible training (``settings.drift_waits_for_training``).
  Expiry is forced (below). Repair always proceeds (the node is broken).
- **Consolidation** (pools with ``WhenEmptyOrUnderutilized``), in Karpenter's order, at most one
  action per call: (a) multi-node: Karpenter's binary search over prefixes (2 to
  ``max_multi_node_candidates`` nodes) of the candidates, cheapest to disrupt first, whose pods
  fit on the other nodes plus at most *one* new node; of the valid prefixes tried, the one that
  saves most (ties: fewer evicted pods, then no launch); (b) single-node delete; (c) single-node
  replace by the cheapest set of new nodes from the provisioner's ``plan_nodes`` (this may
  split one large node into several smaller ones, which Karpenter never does; at most
  ``max_replacement_candidates`` nodes are planned per call). Empty nodes are left to
  :func:`empty_nodes`. A replacement must save at least ``max(min_saving_per_hour,
  min_saving_fraction × removed nodes' price)`` per hour; this threshold replaces Karpenter's
  spot-to-spot flexibility rule (spot nodes may be replaced by cheaper spot nodes).
  Replacements come from the removed nodes' pools and respect pool limits (counting the pool's
  other nodes). Disruption cost order: fewer evicted pods, then lower summed priority, then
  younger pods (less summed run time), then pricier node first, then name.
- **Consolidate-after.** A node is a candidate only when its pods have not changed for the
  pool's ``consolidate_after_seconds``: since ``NodeView.pods_changed_at`` when given, else
  since the latest of its launch and its pods' start times. Empty nodes count from
  ``empty_since`` (or launch, for a node that never had a pod).
- **Budgets** (see :mod:`fleetshare.autoscaling.budgets`) gate emptiness, consolidation, drift
  and expiry per pool; nodes in ``disrupting`` and nodes that are not Ready/healthy count as
  already disrupted. Multi-node consolidation takes at most the allowance of each pool from the
  candidate order; single-node actions need an allowance of one. Repair ignores budgets.
- **Do-not-disrupt.** A node annotation blocks emptiness, consolidation and drift of that node; a
  pod annotation blocks any voluntary action that would evict the pod. Both are overridden by
  expiry (after ``expiry_grace_seconds``) and by repair.
- **PDBs.** :class:`Pdb` allows ``max_unavailable - disrupted`` and/or ``running - min_available``
  more evictions (the smaller when both are set; ``running`` counts the pods naming it). A
  voluntary action whose evictions would exceed that is not taken; a pod naming a PDB that is
  not passed in is treated as not evictable.
- **Floors.** ``floors[pool]`` is the number of the pool's nodes (not counting nodes being
  disrupted) that deletions must leave, e.g. from a schedule; absent or 0 allows scale to zero.
- **Expiry and drift** replace gracefully: the action launches a replacement of the same shape
  (instance type, zone, capacity type; when the pool no longer allows it, the cheapest set from
  ``plan_nodes`` for the node's pods) and ``replace_first=True`` says to remove the old node
  only once the replacement is Ready. A node without pods is just deleted. Expiry is *forced*
  (Karpenter v1: ``expireAfter`` then ``terminationGracePeriod``): do-not-disrupt, PDBs and
  training protection only delay it by ``settings.expiry_grace_seconds`` (default 0, i.e.
  forced at once); unlike Karpenter v1, budgets do apply to expiry here (a graceful roll).
  Drift is voluntary: do-not-disrupt, PDBs and (by default) running non-preemptible training
  block it.
- **Repair** (Karpenter node repair): a node NotReady or failing its GPU health check
  (``unhealthy_since`` set) for ``grace_seconds`` (default 60 s in simulation; Karpenter uses
  30 min for NotReady) is cordoned and terminated at once, its workloads requeued (whole gangs),
  and a replacement of the same instance type, zone and capacity type launched. It ignores
  budgets, PDBs and do-not-disrupt. As in Karpenter, a pool stops repairing while more than
  ``max_unhealthy_fraction`` (20%) of its nodes, rounded up, are unhealthy (systemic failure,
  replacing would not help); so a pool of up to 5 nodes can always repair one node.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, cast

from fleetshare.autoscaling.budgets import BudgetStatus, budget_status
from fleetshare.autoscaling.cloud import CapacityType, Offering
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner import (
    CAPACITY_TYPE_LABEL,
    POOL_LABEL,
    Candidate,
    Launch,
    PodShape,
    node_labels,
    plan_nodes,
    pool_taints,
)
from fleetshare.model.catalog import (
    Catalog,
    InstanceType,
    UnknownInstanceTypeError,
    ec2_name,
    load_catalog,
)
from fleetshare.model.node import (
    INSTANCE_TYPE_LABEL,
    ZONE_LABEL,
    NodeSelectorRequirement,
    Taint,
    Toleration,
)
from fleetshare.model.resources import CPU, MEMORY, is_accelerator
from fleetshare.placement.first_fit import Room, first_fit

ActionKind = Literal["delete-empty", "delete", "replace", "expire", "drift", "repair"]
PodKind = Literal["training", "inference", "batch"]

DO_NOT_DISRUPT_ANNOTATION = "karpenter.sh/do-not-disrupt"
PODS = "pods"
_UNLIMITED_PODS = 10**15


# -- input model ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node as the disruption logic sees it. ``allocatable`` is in milli-units."""

    name: str
    pool: str
    instance_type: str
    zone: str
    capacity_type: str
    price_per_hour: float
    allocatable: Mapping[str, int] = field(hash=False)
    launched_at: float = 0.0
    ready: bool = True
    healthy: bool = True
    """False: NotReady or a failed GPU health check."""
    unhealthy_since: float | None = None
    """When the node went NotReady/unhealthy (None while healthy or still coming up)."""
    drifted: bool = False
    """Its pool's spec changed since the node was launched."""
    do_not_disrupt: bool = False
    """The node carries the ``karpenter.sh/do-not-disrupt`` annotation."""
    empty_since: float | None = None
    """When its last pod left (None: it never had one, or it has pods)."""
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    taints: tuple[Taint, ...] = ()
    pods_changed_at: float | None = None
    """When a pod last bound to or left the node (None: derived, see the module docstring)."""

    @property
    def usable(self) -> bool:
        """Ready and healthy."""
        return self.ready and self.healthy

    def all_labels(self) -> dict[str, str]:
        """Labels including the well-known instance-type, zone, capacity-type and pool ones."""
        out = dict(self.labels)
        out.setdefault(INSTANCE_TYPE_LABEL, self.instance_type)
        out.setdefault(ZONE_LABEL, self.zone)
        out.setdefault(CAPACITY_TYPE_LABEL, self.capacity_type)
        out.setdefault(POOL_LABEL, self.pool)
        return out

    def describe(self) -> str:
        """``node-3 (g5.xlarge, $1.006/h)``."""
        return f"{self.name} ({self.instance_type}, {_money(self.price_per_hour)})"


@dataclass(frozen=True, slots=True)
class PodView:
    """A running pod. ``requests`` is in milli-units; ``gang`` names its gang (see module doc)."""

    name: str
    workload: str
    team: str
    node: str
    requests: Mapping[str, int] = field(hash=False)
    priority: int = 0
    kind: PodKind = "batch"
    preemptible: bool = False
    gang: str | None = None
    do_not_disrupt: bool = False
    """The pod carries the ``karpenter.sh/do-not-disrupt`` annotation."""
    pdb: str | None = None
    started_at: float = 0.0
    node_selector: Mapping[str, str] = field(default_factory=dict, hash=False)
    tolerations: tuple[Toleration, ...] = ()
    affinity: tuple[tuple[NodeSelectorRequirement, ...], ...] = ()

    @property
    def unit(self) -> str:
        """What is requeued when the pod is evicted: its gang, else its workload."""
        return self.gang or self.workload


@dataclass(frozen=True, slots=True)
class Pdb:
    """A PodDisruptionBudget: ``max_unavailable`` and/or ``min_available`` pods, with
    ``disrupted`` of its pods currently unavailable (evicted, pending or not ready)."""

    name: str
    max_unavailable: int | None = None
    min_available: int | None = None
    disrupted: int = 0

    def allowed(self, running: int) -> int | None:
        """More evictions allowed now, given ``running`` pods naming it (None: unlimited)."""
        options = []
        if self.max_unavailable is not None:
            options.append(self.max_unavailable - self.disrupted)
        if self.min_available is not None:
            options.append(running - self.min_available)
        return max(0, min(options)) if options else None


@dataclass(frozen=True, slots=True)
class DisruptionSettings:
    """Tunables (see the module docstring for what each one means)."""

    training_saving_threshold: float = 0.3
    min_saving_fraction: float = 0.05
    min_saving_per_hour: float = 0.01
    max_multi_node_candidates: int = 100
    max_replacement_candidates: int = 10
    plan_time_limit: float = 2.0
    expiry_grace_seconds: float = 0.0
    drift_waits_for_training: bool = True


# -- output model --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Replacement:
    """``count`` new nodes of one offering for a pool."""

    pool: str
    instance_type: str
    zone: str
    capacity_type: CapacityType
    count: int
    price_per_hour: float

    @classmethod
    def from_launch(cls, launch: Launch) -> Replacement:
        """From a provisioner :class:`~fleetshare.autoscaling.provisioner.Launch`."""
        return cls(
            launch.pool,
            launch.instance_type,
            launch.zone,
            cast(CapacityType, launch.capacity_type),
            launch.count,
            launch.price_per_hour,
        )

    @property
    def hourly_cost(self) -> float:
        return self.price_per_hour * self.count

    def describe(self) -> str:
        """``2× g5.xlarge in us-east-1a (on-demand, $1.006/h each)``."""
        return (
            f"{self.count}× {self.instance_type} in {self.zone} "
            f"({self.capacity_type}, {_money(self.price_per_hour)} each)"
        )


@dataclass(frozen=True, slots=True)
class Action:
    """One disruption decision.

    ``nodes`` are removed (cordoned and drained); ``replacements`` are launched; ``evict`` are
    the pods evicted (gang members on kept nodes included); ``requeue`` the gangs/workloads that
    restart as a whole. With ``replace_first`` the old nodes are removed only once the
    replacements are Ready. ``saving_per_hour`` is the removed nodes' price minus the
    replacements' price.
    """

    kind: ActionKind
    nodes: tuple[str, ...]
    reason: str
    replacements: tuple[Replacement, ...] = ()
    evict: tuple[str, ...] = ()
    requeue: tuple[str, ...] = ()
    saving_per_hour: float = 0.0
    replace_first: bool = False
    decided_at: float = 0.0


@dataclass
class Decision:
    """Actions to take, and for every considered node that is kept, why."""

    actions: list[Action] = field(default_factory=list)
    blocked: dict[str, str] = field(default_factory=dict)

    def why_not(self, node: str) -> str | None:
        """Why ``node`` was kept, or None (acted on, or not considered)."""
        return self.blocked.get(node)


@dataclass(frozen=True, slots=True)
class Validation:
    """Whether an earlier action may still be carried out, and why (not)."""

    valid: bool
    reason: str


# -- shared state and helpers --------------------------------------------------------------------


def _money(value: float) -> str:
    return f"${value:.3f}/h"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


class _State:
    """The snapshot, indexed."""

    def __init__(
        self,
        nodes: Iterable[NodeView],
        pods: Iterable[PodView],
        pools: Iterable[NodePool],
        now: float,
        *,
        disrupting: Iterable[str] = (),
        pdbs: Iterable[Pdb] = (),
        settings: DisruptionSettings | None = None,
        floors: Mapping[str, int] | None = None,
    ) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.pools = {p.name: p for p in pools}
        self.now = now
        self.disrupting = frozenset(disrupting)
        self.pdbs = {p.name: p for p in pdbs}
        self.settings = settings or DisruptionSettings()
        self.floors = dict(floors or {})
        self.pods = [p for p in pods if p.node in self.nodes]
        self.pods_on: dict[str, list[PodView]] = {name: [] for name in self.nodes}
        self.gang_members: dict[str, list[PodView]] = {}
        self.pdb_running: dict[str, int] = {}
        for pod in sorted(self.pods, key=lambda p: p.name):
            self.pods_on[pod.node].append(pod)
            if pod.gang is not None:
                self.gang_members.setdefault(pod.gang, []).append(pod)
            if pod.pdb is not None:
                self.pdb_running[pod.pdb] = self.pdb_running.get(pod.pdb, 0) + 1

    def pool_nodes(self, pool: str) -> list[NodeView]:
        return [n for n in self.nodes.values() if n.pool == pool]

    def budget(self, pool_name: str, ignore: Iterable[str] = ()) -> BudgetStatus:
        """The pool's budget now; nodes in ``ignore`` do not count as already disrupting."""
        pool = self.pools[pool_name]
        ignored = set(ignore)
        members = self.pool_nodes(pool_name)
        busy = sum(
            1
            for n in members
            if n.name not in ignored and (n.name in self.disrupting or not n.usable)
        )
        return budget_status(pool.disruption.budgets, len(members), busy, self.now)

    def expand(self, seed: Iterable[PodView]) -> list[PodView]:
        """``seed`` plus every pod of every gang it touches, sorted by name."""
        out = {p.name: p for p in seed}
        for pod in list(out.values()):
            if pod.gang is not None:
                for member in self.gang_members.get(pod.gang, ()):
                    out[member.name] = member
        return [out[name] for name in sorted(out)]


def _request(pod: PodView) -> dict[str, int]:
    req = {k: v for k, v in pod.requests.items() if v > 0 and k != PODS}
    req[PODS] = 1000
    return req


def _size_key(pod: PodView) -> tuple[int, int, int, str]:
    acc = sum(v for k, v in pod.requests.items() if is_accelerator(k))
    return (-acc, -pod.requests.get(CPU, 0), -pod.requests.get(MEMORY, 0), pod.name)


def _free_capacity(allocatable: Mapping[str, int]) -> dict[str, int]:
    free = dict(allocatable)
    free.setdefault(PODS, _UNLIMITED_PODS)
    return free


def _existing_targets(state: _State, removed: set[str], evicted: Sequence[PodView]) -> list[Room]:
    """Nodes that may take evicted pods, with free capacity (evicted pods' requests freed)."""
    leaving = {p.name for p in evicted}
    out = []
    for name in sorted(state.nodes):
        node = state.nodes[name]
        if name in removed or name in state.disrupting or not node.usable:
            continue
        free = _free_capacity(node.allocatable)
        for pod in state.pods_on[name]:
            if pod.name not in leaving:
                for key, amount in _request(pod).items():
                    free[key] = free.get(key, 0) - amount
        out.append(Room(name, node.all_labels(), node.taints, free))
    return out


def _new_targets(
    replacements: Sequence[Replacement], state: _State, catalog: Catalog
) -> list[Room] | str:
    """Nodes the replacements would add (or why they cannot be modelled)."""
    out: list[Room] = []
    for rep in replacements:
        pool = state.pools.get(rep.pool)
        if pool is None:
            return f"unknown-pool: replacement pool {rep.pool} no longer exists"
        try:
            inst = catalog.get(rep.instance_type)
        except UnknownInstanceTypeError:
            return f"no-replacement: unknown instance type {rep.instance_type}"
        offering = Offering(rep.instance_type, rep.zone, rep.capacity_type, rep.price_per_hour)
        labels = node_labels(Candidate(rep.pool, inst, offering), pool)
        taints = pool_taints(pool)
        for _ in range(rep.count):
            name = f"new {rep.instance_type} #{len(out) + 1}"
            out.append(Room(name, labels, taints, _free_capacity(inst.allocatable)))
    return out


def _place(
    pods: Sequence[PodView], targets: Sequence[Room]
) -> tuple[dict[str, str], list[PodView]]:
    """First-fit decreasing: pod name -> target name, and the pods that fit nowhere."""
    placed: dict[str, str] = {}
    left: list[PodView] = []
    for pod in sorted(pods, key=_size_key):
        found = first_fit(
            targets, _request(pod), 1, pod.node_selector, pod.tolerations, pod.affinity
        )
        if found:
            placed[pod.name] = found[0][0].name
        else:
            left.append(pod)
    return placed, left


def _shapes(pods: Sequence[PodView]) -> list[PodShape]:
    grouped: dict[tuple[object, ...], PodShape] = {}
    for pod in pods:
        requests = tuple(sorted((k, v) for k, v in pod.requests.items() if v > 0 and k != PODS))
        selector = tuple(sorted(pod.node_selector.items()))
        key = (requests, selector, pod.tolerations, pod.affinity)
        old = grouped.get(key)
        workloads = old.workloads if old else ()
        if pod.workload not in workloads:
            workloads = (*workloads, pod.workload)
        grouped[key] = PodShape(
            requests=requests,
            count=(old.count if old else 0) + 1,
            node_selector=selector,
            tolerations=pod.tolerations,
            affinity=pod.affinity,
            workloads=workloads,
        )
    return list(grouped.values())


def _pool_usage(
    state: _State, pools: Iterable[str], removed: set[str]
) -> dict[str, dict[str, int]]:
    """What each pool's other nodes use of its limits (``nodes`` as a count)."""
    usage: dict[str, dict[str, int]] = {}
    for pool in pools:
        used: dict[str, int] = {"nodes": 0}
        for node in state.pool_nodes(pool):
            if node.name in removed:
                continue
            used["nodes"] += 1
            for key, amount in node.allocatable.items():
                used[key] = used.get(key, 0) + amount
        usage[pool] = used
    return usage


def _eviction_block(
    evicted: Sequence[PodView], state: _State, *, training: bool = True
) -> str | None:
    """Why these pods may not be evicted voluntarily: do-not-disrupt, PDB, or (with
    ``training``) a training unit that is not entirely preemptible."""
    for pod in evicted:
        if pod.do_not_disrupt:
            return (
                f"do-not-disrupt: pod {pod.name} ({pod.workload}) is annotated "
                f"{DO_NOT_DISRUPT_ANNOTATION}"
            )
    per_pdb: dict[str, int] = {}
    for pod in evicted:
        if pod.pdb is not None:
            per_pdb[pod.pdb] = per_pdb.get(pod.pdb, 0) + 1
    for name, count in sorted(per_pdb.items()):
        pdb = state.pdbs.get(name)
        if pdb is None:
            return f"pdb: PodDisruptionBudget {name} is unknown, so its pods are not evicted"
        allowed = pdb.allowed(state.pdb_running.get(name, 0))
        if allowed is not None and count > allowed:
            return (
                f"pdb: PodDisruptionBudget {name} allows {allowed} more disruption(s); "
                f"this would evict {count}"
            )
    if training:
        for unit, members in sorted(_training_units(evicted).items()):
            stubborn = [p.name for p in members if not p.preemptible]
            if stubborn:
                return (
                    f"training: gang {unit} is training and not preemptible "
                    f"({', '.join(stubborn[:3])}{'...' if len(stubborn) > 3 else ''}); "
                    "it is never disrupted to save money"
                )
    return None


def _training_units(pods: Sequence[PodView]) -> dict[str, list[PodView]]:
    units: dict[str, list[PodView]] = {}
    for pod in pods:
        units.setdefault(pod.unit, []).append(pod)
    return {u: ms for u, ms in units.items() if any(p.kind == "training" for p in ms)}


def _requeue(evicted: Sequence[PodView]) -> tuple[str, ...]:
    """The gangs that restart as a whole (every evicted gang; lone pods just reschedule)."""
    return tuple(sorted({p.gang for p in evicted if p.gang is not None}))


def _requeue_all(evicted: Sequence[PodView]) -> tuple[str, ...]:
    """Every workload of the evicted pods (repair: the workloads go back to the queue)."""
    return tuple(sorted({p.unit for p in evicted}))


def _stable_since(node: NodeView, pods: Sequence[PodView]) -> float:
    if not pods:
        return node.empty_since if node.empty_since is not None else node.launched_at
    if node.pods_changed_at is not None:
        return node.pods_changed_at
    return max([node.launched_at, *(p.started_at for p in pods)])


def _disruption_cost(node: NodeView, state: _State) -> tuple[int, int, float, float, str]:
    evicted = state.expand(state.pods_on[node.name])
    age = sum(max(0.0, state.now - p.started_at) for p in evicted)
    return (len(evicted), sum(p.priority for p in evicted), age, -node.price_per_hour, node.name)


def _node_block(node: NodeView, state: _State) -> str | None:
    """Reasons any voluntary disruption of ``node`` is out of the question."""
    if node.pool not in state.pools:
        return f"unknown-pool: node pool {node.pool} is not known"
    if node.name in state.disrupting:
        return "disrupting: the node is already being disrupted"
    if not node.usable:
        return "not-ready: the node is not Ready/healthy (repair handles it)"
    if node.do_not_disrupt:
        return f"do-not-disrupt: the node is annotated {DO_NOT_DISRUPT_ANNOTATION}"
    return None


def _floor_block(
    state: _State, removed: Sequence[NodeView], added: Mapping[str, int]
) -> str | None:
    by_pool: dict[str, int] = {}
    for node in removed:
        by_pool[node.pool] = by_pool.get(node.pool, 0) + 1
    removed_names = {n.name for n in removed}
    for pool, count in sorted(by_pool.items()):
        floor = state.floors.get(pool, 0)
        if floor <= 0:
            continue
        live = sum(
            1
            for n in state.pool_nodes(pool)
            if n.name not in state.disrupting or n.name in removed_names
        )
        after = live - count + added.get(pool, 0)
        if after < floor:
            return f"floor: pool {pool} must keep {floor} node(s); this would leave {after}"
    return None


def _budget_block(state: _State, removed: Sequence[NodeView], ignore: Iterable[str]) -> str | None:
    by_pool: dict[str, int] = {}
    for node in removed:
        by_pool[node.pool] = by_pool.get(node.pool, 0) + 1
    ignored = set(ignore)
    for pool, count in sorted(by_pool.items()):
        status = state.budget(pool, ignored)
        if status.allowed is not None and count > status.allowed:
            return f"budget: pool {pool}: {status.description}"
    return None


# -- consolidation -------------------------------------------------------------------------------


def _evaluate(
    removed: Sequence[NodeView],
    state: _State,
    catalog: Catalog,
    offerings: Sequence[Offering],
    *,
    allow_replace: bool,
    max_new_nodes: int | None,
    fixed: tuple[Replacement, ...] | None = None,
) -> Action | str:
    """The consolidation action removing exactly ``removed`` (or why there is none). With
    ``fixed`` the replacements are given (revalidation) instead of planned."""
    names = {n.name for n in removed}
    seed = [p for n in removed for p in state.pods_on[n.name]]
    evicted = state.expand(seed)
    block = _eviction_block(evicted, state, training=True)
    if block:
        return block
    block = _budget_block(state, removed, names)
    if block:
        return block
    targets = _existing_targets(state, names, evicted)
    placed, left = _place(evicted, targets)
    replacements: tuple[Replacement, ...] = ()
    new_targets: list[Room] = []
    if fixed is not None and fixed and not left:
        return "does-not-fit: state changed: the pods now fit without the planned replacement"
    if left:
        if not allow_replace:
            return (
                f"does-not-fit: {_plural(len(left), 'pod')} ({', '.join(p.name for p in left[:3])}"
                f"{'...' if len(left) > 3 else ''}) would not fit on the other nodes"
            )
        if fixed is not None:
            replacements = fixed
        else:
            pool_names = sorted({n.pool for n in removed})
            plan = plan_nodes(
                _shapes(left),
                [state.pools[p] for p in pool_names],
                catalog,
                offerings,
                pool_usage=_pool_usage(state, pool_names, names),
                time_limit=state.settings.plan_time_limit,
            )
            if plan.unplaceable or not plan.launches:
                return (
                    "does-not-fit: the pods fit neither on the other nodes nor on new nodes "
                    "the pool may launch"
                )
            replacements = tuple(Replacement.from_launch(la) for la in plan.launches)
        new_count = sum(r.count for r in replacements)
        if max_new_nodes is not None and new_count > max_new_nodes:
            return (
                f"does-not-fit: the pods would need {_plural(new_count, 'new node')}; "
                f"at most {max_new_nodes} allowed here"
            )
        new = _new_targets(replacements, state, catalog)
        if isinstance(new, str):
            return new
        new_targets = new
        more, still_left = _place(left, new_targets)
        if still_left:
            return "does-not-fit: the pods do not fit on the planned replacement"
        placed.update(more)
    removed_cost = sum(n.price_per_hour for n in removed)
    new_cost = sum(r.hourly_cost for r in replacements)
    saving = removed_cost - new_cost
    settings = state.settings
    if replacements:
        minimum = max(settings.min_saving_per_hour, settings.min_saving_fraction * removed_cost)
        if saving < minimum - 1e-9:
            return (
                f"no-saving: the cheapest replacement costs {_money(new_cost)} vs "
                f"{_money(removed_cost)}; a replacement must save at least {_money(minimum)}"
            )
    added: dict[str, int] = {}
    for rep in replacements:
        added[rep.pool] = added.get(rep.pool, 0) + rep.count
    block = _floor_block(state, removed, added)
    if block:
        return block
    units = _training_units(evicted)
    training_note = ""
    if units:
        touched = names | {p.node for p in evicted}
        basis = sum(state.nodes[n].price_per_hour for n in touched)
        needed = settings.training_saving_threshold * basis
        if saving < needed - 1e-9:
            return (
                f"training: preemptible training gang {', '.join(sorted(units))} is protected: "
                f"saving {_money(saving)} < {settings.training_saving_threshold:.0%} of "
                f"{_money(basis)} (the nodes it touches)"
            )
        training_note = (
            f"; restarts preemptible training gang {', '.join(sorted(units))} "
            f"(saving {saving / basis:.0%} ≥ {settings.training_saving_threshold:.0%} of the "
            "nodes it touches)"
        )
    return _consolidation_action(
        removed, evicted, placed, new_targets, replacements, saving, state, training_note
    )


def _consolidation_action(
    removed: Sequence[NodeView],
    evicted: Sequence[PodView],
    placed: Mapping[str, str],
    new_targets: Sequence[Room],
    replacements: tuple[Replacement, ...],
    saving: float,
    state: _State,
    training_note: str,
) -> Action:
    node_text = ", ".join(n.describe() for n in removed)
    own = sum(len(state.pods_on[n.name]) for n in removed)
    pods_text = _plural(own, "pod")
    owner = "its" if len(removed) == 1 else "their"
    new_names = {t.name for t in new_targets}
    existing = sorted({t for t in placed.values() if t not in new_names})
    moved_new = sum(1 for t in placed.values() if t in new_names)
    gangs = _requeue(evicted)
    gang_text = ""
    extra = len(evicted) - own
    if gangs:
        gang_text = f"; gang {', '.join(gangs)} restarts whole"
        if extra:
            gang_text += f" ({_plural(extra, 'more pod')} evicted from other nodes)"
    if replacements:
        kind: ActionKind = "replace"
        reps = ", ".join(r.describe() for r in replacements)
        where = []
        if moved_new:
            plural = "s" if len(new_names) > 1 else ""
            where.append(f"{_plural(moved_new, 'pod')} to the new node{plural}")
        if existing:
            moved_old = len(placed) - moved_new
            where.append(f"{_plural(moved_old, 'pod')} to {', '.join(existing)}")
        text = (
            f"consolidation: replace {node_text} with {reps}, saving {_money(saving)}: "
            f"moves {' and '.join(where)}"
        )
    else:
        kind = "delete"
        text = (
            f"consolidation: delete {node_text}: {owner} {pods_text} "
            f"{'fits' if own == 1 else 'fit'} on "
            f"{', '.join(existing)}, saving {_money(saving)}"
        )
    return Action(
        kind=kind,
        nodes=tuple(n.name for n in removed),
        reason=text + gang_text + training_note,
        replacements=replacements,
        evict=tuple(p.name for p in evicted),
        requeue=gangs,
        saving_per_hour=saving,
        decided_at=state.now,
    )


def _consolidation_block(node: NodeView, state: _State) -> str | None:
    block = _node_block(node, state)
    if block:
        return block
    pool = state.pools[node.pool]
    pods = state.pods_on[node.name]
    if not pods:
        return "policy: empty nodes are handled by empty_nodes"
    if pool.disruption.consolidation_policy == "WhenEmpty":
        return f"policy: pool {pool.name} consolidates only empty nodes (WhenEmpty)"
    after = pool.disruption.consolidate_after_seconds
    since = _stable_since(node, pods)
    if state.now - since < after:
        return (
            f"consolidate-after: its pods changed {state.now - since:.0f}s ago; pool "
            f"{pool.name} waits {after:g}s"
        )
    return _eviction_block(state.expand(pods), state, training=True)


def consolidation(
    nodes: Sequence[NodeView],
    pods: Sequence[PodView],
    pools: Sequence[NodePool],
    catalog: Catalog,
    offerings: Sequence[Offering],
    now: float,
    *,
    disrupting: Iterable[str] = (),
    pdbs: Sequence[Pdb] = (),
    settings: DisruptionSettings | None = None,
    floors: Mapping[str, int] | None = None,
) -> Decision:
    """At most one consolidation action (multi-node, then single-node delete, then single-node
    replace), and why every other considered node is kept."""
    state = _State(
        nodes, pods, pools, now, disrupting=disrupting, pdbs=pdbs, settings=settings, floors=floors
    )
    decision = Decision()
    candidates = []
    for name in sorted(state.nodes):
        node = state.nodes[name]
        block = _consolidation_block(node, state)
        if block:
            decision.blocked[name] = block
        else:
            candidates.append(node)
    candidates.sort(key=lambda n: _disruption_cost(n, state))
    budgets = {pool: state.budget(pool) for pool in {n.pool for n in candidates}}
    singles = []
    for node in candidates:
        status = budgets[node.pool]
        if status.allowed is not None and status.allowed <= 0:
            decision.blocked[node.name] = f"budget: pool {node.pool}: {status.description}"
        else:
            singles.append(node)
    left = {pool: status.allowed for pool, status in budgets.items()}
    multi = []
    for node in singles:
        allowance = left[node.pool]
        if allowance is None or allowance > 0:
            multi.append(node)
            if allowance is not None:
                left[node.pool] = allowance - 1
    multi = multi[: state.settings.max_multi_node_candidates]
    action = _multi_node(multi, state, catalog, offerings)
    reasons: dict[str, str] = {}
    if action is None:
        for node in singles:
            result = _evaluate(
                [node], state, catalog, offerings, allow_replace=False, max_new_nodes=0
            )
            if isinstance(result, Action):
                action = result
                break
            reasons[node.name] = result
    if action is None:
        tried = 0
        for node in singles:
            if not reasons[node.name].startswith("does-not-fit:"):
                continue
            if tried >= state.settings.max_replacement_candidates:
                reasons[node.name] = (
                    "not-evaluated: replacement search limit reached this pass "
                    f"({state.settings.max_replacement_candidates} nodes)"
                )
                continue
            tried += 1
            result = _evaluate(
                [node], state, catalog, offerings, allow_replace=True, max_new_nodes=None
            )
            if isinstance(result, Action):
                action = result
                break
            reasons[node.name] = result
    chosen = set(action.nodes) if action else set()
    for node in singles:
        if node.name in chosen:
            continue
        decision.blocked[node.name] = reasons.get(
            node.name,
            "not-evaluated: one consolidation action per pass; re-evaluated on the next pass",
        )
    if action is not None:
        decision.actions.append(action)
    return decision


def _multi_node(
    candidates: Sequence[NodeView],
    state: _State,
    catalog: Catalog,
    offerings: Sequence[Offering],
) -> Action | None:
    """Karpenter's multi-node consolidation: binary search for the longest candidate prefix
    that can be deleted, or replaced by one cheaper node."""
    low, high = 2, len(candidates)
    found: list[Action] = []
    while low <= high:
        mid = (low + high) // 2
        result = _evaluate(
            candidates[:mid], state, catalog, offerings, allow_replace=True, max_new_nodes=1
        )
        if isinstance(result, Action):
            found.append(result)
            low = mid + 1
        else:
            high = mid - 1
    # Of the valid prefixes tried, the largest saving; on a tie the least churn (fewer evicted
    # pods, no launch): replacing 3 nodes by one like them is worse than deleting 2 of them.
    return min(
        found,
        key=lambda a: (-round(a.saving_per_hour, 9), len(a.evict), len(a.replacements)),
        default=None,
    )


# -- emptiness -----------------------------------------------------------------------------------


def empty_nodes(
    nodes: Sequence[NodeView],
    pods: Sequence[PodView],
    pools: Sequence[NodePool],
    now: float,
    *,
    floors: Mapping[str, int] | None = None,
    disrupting: Iterable[str] = (),
) -> Decision:
    """Delete nodes that have been empty for their pool's ``consolidate_after_seconds`` (both
    consolidation policies), down to zero or the pool's floor, within budgets: one
    ``delete-empty`` action for all of them (most expensive first)."""
    state = _State(nodes, pods, pools, now, disrupting=disrupting, floors=floors)
    decision = Decision()
    ready: dict[str, list[NodeView]] = {}
    for name in sorted(state.nodes):
        node = state.nodes[name]
        if state.pods_on[name]:
            continue
        block = _node_block(node, state)
        if block is None:
            after = state.pools[node.pool].disruption.consolidate_after_seconds
            since = _stable_since(node, ())
            if now - since < after:
                block = f"consolidate-after: empty for {now - since:.0f}s; pool waits {after:g}s"
        if block:
            decision.blocked[name] = block
        else:
            ready.setdefault(node.pool, []).append(node)
    chosen: list[NodeView] = []
    for pool, members in sorted(ready.items()):
        members.sort(key=lambda n: (-n.price_per_hour, _stable_since(n, ()), n.name))
        status = state.budget(pool)
        live = sum(1 for n in state.pool_nodes(pool) if n.name not in state.disrupting)
        floor = state.floors.get(pool, 0)
        room = max(0, live - floor)
        for index, node in enumerate(members):
            if index >= room:
                decision.blocked[node.name] = (
                    f"floor: pool {pool} must keep {floor} node(s) (it has {live})"
                )
            elif status.allowed is not None and index >= status.allowed:
                decision.blocked[node.name] = f"budget: pool {pool}: {status.description}"
            else:
                chosen.append(node)
    if chosen:
        chosen.sort(key=lambda n: (-n.price_per_hour, _stable_since(n, ()), n.name))
        saving = sum(n.price_per_hour for n in chosen)
        text = ", ".join(
            f"{n.describe()} empty for {now - _stable_since(n, ()):.0f}s" for n in chosen
        )
        decision.actions.append(
            Action(
                kind="delete-empty",
                nodes=tuple(n.name for n in chosen),
                reason=f"emptiness: delete {text}, saving {_money(saving)}",
                saving_per_hour=saving,
                decided_at=now,
            )
        )
    return decision


# -- expiration and drift ------------------------------------------------------------------------


def _offering_ok(
    node: NodeView, pool: NodePool, catalog: Catalog, offerings: Sequence[Offering]
) -> float | None:
    """The price of a same-shape replacement when the pool still allows it, else None."""
    try:
        inst: InstanceType | None = catalog.get(node.instance_type)
    except UnknownInstanceTypeError:
        inst = None
    if inst is not None and not pool.allows(inst):
        return None
    if node.capacity_type not in pool.capacity_types:
        return None
    if pool.zones and node.zone not in pool.zones:
        return None
    price = node.price_per_hour
    for offering in offerings:
        if (
            ec2_name(offering.instance_type) == ec2_name(node.instance_type)
            and offering.zone == node.zone
            and offering.capacity_type == node.capacity_type
        ):
            if not offering.available:
                return None
            price = offering.price_per_hour
    return price


def _replacement_for(
    node: NodeView,
    state: _State,
    catalog: Catalog,
    offerings: Sequence[Offering],
) -> tuple[Replacement, ...] | str:
    pool = state.pools[node.pool]
    price = _offering_ok(node, pool, catalog, offerings)
    if price is not None:
        capacity = cast(CapacityType, node.capacity_type)
        return (Replacement(pool.name, node.instance_type, node.zone, capacity, 1, price),)
    if not offerings:
        return (
            f"no-replacement: pool {pool.name} no longer offers {node.instance_type} "
            f"({node.capacity_type}, {node.zone}) and no offerings were given to plan another"
        )
    plan = plan_nodes(
        _shapes(state.pods_on[node.name]),
        [pool],
        catalog,
        offerings,
        pool_usage=_pool_usage(state, [pool.name], {node.name}),
        time_limit=state.settings.plan_time_limit,
    )
    if plan.unplaceable or not plan.launches:
        return f"no-replacement: pool {pool.name} can launch no node for the pods of {node.name}"
    return tuple(Replacement.from_launch(la) for la in plan.launches)


def _expired(node: NodeView, pool: NodePool, now: float) -> bool:
    after = pool.disruption.expire_after_seconds
    return after is not None and now - node.launched_at >= after


def _expiry_block(node: NodeView, state: _State, kind: ActionKind) -> str | None:
    """Why an expired or drifted node is kept for now."""
    if node.name in state.disrupting:
        return "disrupting: the node is already being disrupted"
    if not node.usable:
        return "not-ready: the node is not Ready/healthy (repair handles it)"
    evicted = state.expand(state.pods_on[node.name])
    if kind == "expire":
        pool = state.pools[node.pool]
        after = pool.disruption.expire_after_seconds or 0.0
        forced_at = node.launched_at + after + state.settings.expiry_grace_seconds
        if state.now >= forced_at:
            return None
        protection: str | None = None
        if node.do_not_disrupt:
            protection = f"do-not-disrupt: the node is annotated {DO_NOT_DISRUPT_ANNOTATION}"
        protection = protection or _eviction_block(evicted, state, training=True)
        if protection:
            return f"{protection} (expired; forced at t={forced_at:.0f})"
        return None
    if node.do_not_disrupt:
        return f"do-not-disrupt: the node is annotated {DO_NOT_DISRUPT_ANNOTATION}"
    block = _eviction_block(evicted, state, training=state.settings.drift_waits_for_training)
    return f"{block} (drifted; waits)" if block else None


def expiration_and_drift(
    nodes: Sequence[NodeView],
    pods: Sequence[PodView],
    pools: Sequence[NodePool],
    now: float,
    *,
    disrupting: Iterable[str] = (),
    pdbs: Sequence[Pdb] = (),
    settings: DisruptionSettings | None = None,
    catalog: Catalog | None = None,
    offerings: Sequence[Offering] = (),
) -> Decision:
    """Replace-first actions for expired nodes (older than the pool's ``expire_after_seconds``;
    forced) and drifted nodes (voluntary), expired first, within budgets."""
    state = _State(nodes, pods, pools, now, disrupting=disrupting, pdbs=pdbs, settings=settings)
    catalog = catalog or load_catalog()
    decision = Decision()
    due: list[tuple[int, tuple[int, int, float, float, str], NodeView, ActionKind]] = []
    for name in sorted(state.nodes):
        node = state.nodes[name]
        pool = state.pools.get(node.pool)
        if pool is None:
            continue
        if _expired(node, pool, now):
            kind: ActionKind = "expire"
        elif node.drifted:
            kind = "drift"
        else:
            continue
        block = _expiry_block(node, state, kind)
        if block:
            decision.blocked[name] = block
            continue
        due.append((0 if kind == "expire" else 1, _disruption_cost(node, state), node, kind))
    due.sort(key=lambda item: (item[0], item[1]))
    left: dict[str, int | None] = {}
    for _, _, node, kind in due:
        if node.pool not in left:
            left[node.pool] = state.budget(node.pool).allowed
        allowance = left[node.pool]
        if allowance is not None and allowance <= 0:
            status = state.budget(node.pool)
            decision.blocked[node.name] = f"budget: pool {node.pool}: {status.description}"
            continue
        own = state.pods_on[node.name]
        evicted = state.expand(own)
        replacements: tuple[Replacement, ...] = ()
        if own:
            found = _replacement_for(node, state, catalog, offerings)
            if isinstance(found, str):
                decision.blocked[node.name] = found
                continue
            replacements = found
        if allowance is not None:
            left[node.pool] = allowance - 1
        decision.actions.append(_roll_action(node, kind, evicted, replacements, state))
    return decision


def _roll_action(
    node: NodeView,
    kind: ActionKind,
    evicted: Sequence[PodView],
    replacements: tuple[Replacement, ...],
    state: _State,
) -> Action:
    pool = state.pools[node.pool]
    if kind == "expire":
        why = (
            f"expiration: {node.describe()} is {state.now - node.launched_at:.0f}s old "
            f"(pool {pool.name} expires nodes after {pool.disruption.expire_after_seconds:g}s)"
        )
    else:
        why = f"drift: {node.describe()} no longer matches pool {pool.name}'s spec"
    if replacements:
        reps = ", ".join(r.describe() for r in replacements)
        why += f"; launch {reps} first, then drain {_plural(len(evicted), 'pod')}"
    else:
        why += "; it has no pods: delete it"
    gangs = _requeue(evicted)
    if gangs:
        why += f"; gang {', '.join(gangs)} restarts whole"
    return Action(
        kind=kind,
        nodes=(node.name,),
        reason=why,
        replacements=replacements,
        evict=tuple(p.name for p in evicted),
        requeue=gangs,
        saving_per_hour=node.price_per_hour - sum(r.hourly_cost for r in replacements),
        replace_first=bool(replacements),
        decided_at=state.now,
    )


# -- repair --------------------------------------------------------------------------------------


def _unhealthy(node: NodeView) -> bool:
    return not node.usable and node.unhealthy_since is not None


def repair(
    nodes: Sequence[NodeView],
    pods: Sequence[PodView],
    now: float,
    *,
    grace_seconds: float = 60.0,
    max_unhealthy_fraction: float = 0.2,
    disrupting: Iterable[str] = (),
) -> Decision:
    """Replace nodes unhealthy for ``grace_seconds``: terminate at once, requeue their
    workloads (whole gangs), launch the same shape; halted per pool while more than
    ``max_unhealthy_fraction`` of its nodes (rounded up) are unhealthy."""
    state = _State(nodes, pods, (), now, disrupting=disrupting)
    decision = Decision()
    by_pool: dict[str, list[NodeView]] = {}
    for node in state.nodes.values():
        by_pool.setdefault(node.pool, []).append(node)
    for pool, members in sorted(by_pool.items()):
        sick = sorted((n for n in members if _unhealthy(n)), key=lambda n: n.name)
        if not sick:
            continue
        threshold = math.ceil(max_unhealthy_fraction * len(members) - 1e-9)
        if len(sick) > threshold:
            for node in sick:
                decision.blocked[node.name] = (
                    f"repair-halted: {len(sick)} of {len(members)} nodes in pool {pool} are "
                    f"unhealthy (more than {max_unhealthy_fraction:.0%}); a systemic failure "
                    "is not fixed by replacing nodes"
                )
            continue
        for node in sick:
            since = now if node.unhealthy_since is None else node.unhealthy_since
            if node.name in state.disrupting:
                decision.blocked[node.name] = "disrupting: the node is already being disrupted"
            elif now - since < grace_seconds:
                decision.blocked[node.name] = (
                    f"repair-grace: unhealthy for {now - since:.0f}s; repaired after "
                    f"{grace_seconds:g}s"
                )
            else:
                decision.actions.append(_repair_action(node, state, now - since, grace_seconds))
    return decision


def _repair_action(node: NodeView, state: _State, for_seconds: float, grace: float) -> Action:
    evicted = state.expand(state.pods_on[node.name])
    requeue = _requeue_all(evicted)
    rep = Replacement(
        node.pool,
        node.instance_type,
        node.zone,
        cast(CapacityType, node.capacity_type),
        1,
        node.price_per_hour,
    )
    status = "NotReady" if not node.ready else "failing its health check"
    text = (
        f"repair: {node.describe()} {status} for {for_seconds:.0f}s (grace {grace:g}s): cordon "
        f"and terminate; launch {rep.describe()}"
    )
    if requeue:
        elsewhere = sum(1 for p in evicted if p.node != node.name)
        text += f"; requeue {', '.join(requeue)}"
        if elsewhere:
            text += f" ({_plural(elsewhere, 'gang pod')} on other nodes evicted too)"
    return Action(
        kind="repair",
        nodes=(node.name,),
        reason=text,
        replacements=(rep,),
        evict=tuple(p.name for p in evicted),
        requeue=requeue,
        saving_per_hour=0.0,
        replace_first=False,
        decided_at=state.now,
    )


# -- revalidation --------------------------------------------------------------------------------


def revalidate(
    action: Action,
    nodes: Sequence[NodeView],
    pods: Sequence[PodView],
    pools: Sequence[NodePool],
    now: float,
    *,
    disrupting: Iterable[str] = (),
    pdbs: Sequence[Pdb] = (),
    settings: DisruptionSettings | None = None,
    floors: Mapping[str, int] | None = None,
    catalog: Catalog | None = None,
    grace_seconds: float = 60.0,
) -> Validation:
    """Re-check an earlier ``action`` against the current state. The action's own nodes in
    ``disrupting`` (marked by the controller meanwhile) do not count against it."""
    own = set(action.nodes)
    state = _State(
        nodes,
        pods,
        pools,
        now,
        disrupting=set(disrupting) - own,
        pdbs=pdbs,
        settings=settings,
        floors=floors,
    )
    missing = [n for n in action.nodes if n not in state.nodes]
    if missing:
        return Validation(False, f"node {', '.join(missing)} no longer exists")
    removed = [state.nodes[n] for n in action.nodes]
    if action.kind == "repair":
        node = removed[0]
        if not _unhealthy(node):
            return Validation(False, f"node {node.name} recovered")
        since = now if node.unhealthy_since is None else node.unhealthy_since
        if now - since < grace_seconds:
            return Validation(False, f"node {node.name} has not been unhealthy for the grace")
        return Validation(True, "node is still unhealthy")
    if action.kind in ("expire", "drift"):
        node = removed[0]
        pool = state.pools.get(node.pool)
        if pool is None:
            return Validation(False, f"node pool {node.pool} no longer exists")
        if action.kind == "expire" and not _expired(node, pool, now):
            return Validation(False, f"node {node.name} is not expired")
        if action.kind == "drift" and not node.drifted:
            return Validation(False, f"node {node.name} no longer drifted")
        block = _expiry_block(node, state, action.kind) or _budget_block(state, removed, own)
        if block:
            return Validation(False, block)
        return Validation(True, f"node {node.name} still due for {action.kind}")
    known = set(action.evict)
    for node in removed:
        arrived = [p.name for p in state.pods_on[node.name] if p.name not in known]
        if arrived:
            return Validation(
                False,
                f"node {node.name} got new pod {', '.join(arrived)} since the decision",
            )
        block = _node_block(node, state)
        if block:
            return Validation(False, block)
    if action.kind == "delete-empty":
        block = _budget_block(state, removed, own) or _floor_block(state, removed, {})
        if block:
            return Validation(False, block)
        return Validation(True, "nodes are still empty")
    for node in removed:
        block = _consolidation_block(node, state)
        if block:
            return Validation(False, block)
    result = _evaluate(
        removed,
        state,
        catalog or load_catalog(),
        (),
        allow_replace=bool(action.replacements),
        max_new_nodes=None,
        fixed=action.replacements,
    )
    if isinstance(result, str):
        return Validation(False, result)
    return Validation(True, "still valid: " + result.reason)
