"""The indexed snapshot every method reads, and the checks they share (one rule, one place):
placement of evicted pods (:func:`fleetshare.placement.first_fit`), budgets, floors, PDBs,
do-not-disrupt, training protection and consolidate-after."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from fleetshare.autoscaling.budgets import BudgetStatus, budget_status
from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.disruption.types import (
    DO_NOT_DISRUPT_ANNOTATION,
    DisruptionSettings,
    DoNotDisrupt,
    NodeView,
    Pdb,
    PodView,
    Replacement,
)
from fleetshare.autoscaling.nodepool import NODES, NodePool, counted
from fleetshare.autoscaling.nodepool import pool_usage as usage_of
from fleetshare.autoscaling.provisioner import (
    Candidate,
    PodShape,
    node_labels,
    pool_taints,
)
from fleetshare.model.catalog import Catalog, UnknownInstanceTypeError, load_catalog
from fleetshare.model.node import Taint
from fleetshare.model.reason import Reason
from fleetshare.model.resources import CPU, MEMORY, is_accelerator
from fleetshare.placement.first_fit import Room, first_fit, first_fit_together
from fleetshare.placement.gpu_slots import counted_requests

PODS = "pods"
_UNLIMITED_PODS = 10**15


def why(category: str, text: str, **numbers: float) -> Reason:
    """A reason whose message is ``"category: text"`` (the words users have always seen)."""
    return Reason(category, f"{category}: {text}", numbers)


def suffixed(reason: Reason, suffix: str) -> Reason:
    """``reason`` with ``suffix`` appended to its message."""
    return Reason(reason.category, reason.message + suffix, reason.numbers)


class State:
    """The snapshot, indexed: nodes, pods (by node, by gang, per PDB), pools and settings.

    ``now`` is epoch seconds; nothing here reads a clock. ``catalog`` defaults to the bundled
    one, loaded only when a method needs it."""

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
        do_not_disrupt: DoNotDisrupt | None = None,
        catalog: Catalog | None = None,
        offerings: Sequence[Offering] = (),
    ) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.pools = {p.name: p for p in pools}
        self.now = now
        self.disrupting = frozenset(disrupting)
        self.pdbs = {p.name: p for p in pdbs}
        self.settings = settings or DisruptionSettings()
        self.floors = dict(floors or {})
        self.pinned = do_not_disrupt or DoNotDisrupt()
        self._catalog = catalog
        self.offerings = tuple(offerings)
        self.pods = [p for p in pods if p.node in self.nodes]
        self._rooms: (
            dict[str, tuple[dict[str, int], Mapping[str, str], tuple[Taint, ...]]] | None
        ) = None
        self.pods_on: dict[str, list[PodView]] = {name: [] for name in self.nodes}
        self.gang_members: dict[str, list[PodView]] = {}
        self.pdb_running: dict[str, int] = {}
        for pod in sorted(self.pods, key=lambda p: p.name):
            self.pods_on[pod.node].append(pod)
            if pod.gang is not None:
                self.gang_members.setdefault(pod.gang, []).append(pod)
            for name in self.pdbs_of(pod):
                self.pdb_running[name] = self.pdb_running.get(name, 0) + 1

    def rooms(self) -> dict[str, tuple[dict[str, int], Mapping[str, str], tuple[Taint, ...]]]:
        """Usable nodes not being disrupted, by name in order: free capacity with every pod
        counted, labels, taints. Computed once per snapshot: each candidate a method weighs
        frees only its own pods (recounting every pod on every node per candidate made a
        pass over 1,000 nodes take seconds)."""
        if self._rooms is None:
            self._rooms = {}
            for name in sorted(self.nodes):
                node = self.nodes[name]
                if name in self.disrupting or not node.usable:
                    continue
                free = _free_capacity(node.allocatable)
                for pod in self.pods_on[name]:
                    for key, amount in request(pod).items():
                        free[key] = free.get(key, 0) - amount
                self._rooms[name] = (free, node.all_labels(), node.taints)
        return self._rooms

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = load_catalog()
        return self._catalog

    def pdbs_of(self, pod: PodView) -> list[str]:
        """The PDBs covering ``pod``, by name (a name the pod gives is listed even if unknown)."""
        names = {p.name for p in self.pdbs.values() if p.covers(pod)}
        if pod.pdb is not None:
            names.add(pod.pdb)
        return sorted(names)

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


# -- placing evicted pods ------------------------------------------------------------------------


def request(pod: PodView) -> dict[str, int]:
    """What a pod takes of a node's totals (a GPU share counted at its
    :func:`~fleetshare.placement.gpu_slots.share_footprint`), one pod slot included."""
    req = counted_requests({k: v for k, v in pod.requests.items() if v > 0 and k != PODS})
    req[PODS] = 1000
    return req


def _size_key(pod: PodView) -> tuple[int, int, int, str]:
    acc = sum(v for k, v in pod.requests.items() if is_accelerator(k))
    return (-acc, -pod.requests.get(CPU, 0), -pod.requests.get(MEMORY, 0), pod.name)


def _free_capacity(allocatable: Mapping[str, int]) -> dict[str, int]:
    free = dict(allocatable)
    free.setdefault(PODS, _UNLIMITED_PODS)
    return free


def existing_targets(state: State, removed: set[str], evicted: Sequence[PodView]) -> list[Room]:
    """Nodes that may take evicted pods, with free capacity (evicted pods' requests freed).

    A nominated node (:func:`node_nominated`) is none: pending work counts on its room.
    Karpenter's scheduling simulation for a disruption places the pending pods beside the
    candidates' pods (``SimulateScheduling``: "start by getting all pending pods"), so room a
    pending pod was nominated to is not free for them. Counting it free, consolidation moved a
    replica onto the node a reclaimed training gang waited on, the gang bought a node, the
    next replica moved onto that one, and so on for ever."""
    back: dict[str, list[PodView]] = {}
    for pod in {p.name: p for p in evicted}.values():
        back.setdefault(pod.node, []).append(pod)
    out = []
    for name, (used, labels, taints) in state.rooms().items():
        if name in removed or node_nominated(state.nodes[name], state) is not None:
            continue
        free = dict(used)
        for pod in back.get(name, ()):
            for key, amount in request(pod).items():
                free[key] = free.get(key, 0) + amount
        out.append(Room(name, labels, taints, free))
    return out


def new_targets(replacements: Sequence[Replacement], state: State) -> list[Room] | Reason:
    """Nodes the replacements would add (or why they cannot be modelled)."""
    out: list[Room] = []
    for rep in replacements:
        pool = state.pools.get(rep.pool)
        if pool is None:
            return why("unknown-pool", f"replacement pool {rep.pool} no longer exists")
        try:
            inst = state.catalog.get(rep.instance_type)
        except UnknownInstanceTypeError:
            return why("no-replacement", f"unknown instance type {rep.instance_type}")
        offering = Offering(rep.instance_type, rep.zone, rep.capacity_type, rep.price_per_hour)
        labels = node_labels(Candidate(rep.pool, inst, offering), pool)
        taints = pool_taints(pool)
        for _ in range(rep.count):
            name = f"new {rep.instance_type} #{len(out) + 1}"
            out.append(Room(name, labels, taints, _free_capacity(inst.allocatable)))
    return out


def place(pods: Sequence[PodView], targets: Sequence[Room]) -> tuple[dict[str, str], list[PodView]]:
    """First-fit decreasing: pod name -> target name, and the pods that fit nowhere. The pods
    of a pod set kept in one topology domain are placed together, first (all or none when the
    domain is required: :func:`~fleetshare.placement.first_fit.first_fit_together`)."""
    placed: dict[str, str] = {}
    left: list[PodView] = []
    together: dict[tuple[str, str], list[PodView]] = {}
    for pod in pods:
        if pod.domain is not None:
            together.setdefault((pod.unit, pod.podset), []).append(pod)
    for key in sorted(together, key=lambda k: (_size_key(together[k][0]), -len(together[k]))):
        members = sorted(together[key], key=lambda p: p.name)
        first = members[0]
        found = first_fit_together(
            targets,
            request(first),
            len(members),
            first.node_selector,
            first.tolerations,
            first.affinity,
            first.domain,
            first.domain_required,
        )
        rest = iter(members)
        for room, n in found:
            for _ in range(n):
                placed[next(rest).name] = room.name
        left.extend(rest)
    for pod in sorted(pods, key=_size_key):
        if pod.domain is not None:
            continue
        found = first_fit(
            targets, request(pod), 1, pod.node_selector, pod.tolerations, pod.affinity
        )
        if found:
            placed[pod.name] = found[0][0].name
        else:
            left.append(pod)
    return placed, left


def shapes(pods: Sequence[PodView]) -> list[PodShape]:
    """The pods grouped into the provisioner's shapes (for ``plan_nodes``); the pods of a pod
    set kept in one domain are a shape of their own, planned into one domain."""
    grouped: dict[tuple[object, ...], PodShape] = {}
    for pod in pods:
        requests = tuple(sorted((k, v) for k, v in pod.requests.items() if v > 0 and k != PODS))
        selector = tuple(sorted(pod.node_selector.items()))
        own = (pod.unit, pod.podset, pod.domain, pod.domain_required) if pod.domain else None
        key = (requests, selector, pod.tolerations, pod.affinity, own)
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
            domain=pod.domain,
            domain_required=pod.domain_required,
        )
    return list(grouped.values())


def pool_usage(state: State, pools: Iterable[str], removed: set[str]) -> dict[str, dict[str, int]]:
    """What each pool's other nodes use of its limits (see :func:`~.nodepool.pool_usage`)."""
    wanted = list(pools)
    usage = {pool: {NODES: 0} for pool in wanted}
    catalog = state.catalog
    usage.update(
        usage_of(
            (node.pool, counted(catalog, node.instance_type, node.allocatable))
            for pool in wanted
            for node in state.pool_nodes(pool)
            if node.name not in removed
        )
    )
    return usage


# -- protections ---------------------------------------------------------------------------------


def eviction_block(
    evicted: Sequence[PodView], state: State, *, training: bool = True
) -> Reason | None:
    """Why these pods may not be evicted voluntarily: do-not-disrupt, PDB, or (with
    ``training``) a training unit that is not entirely preemptible."""
    for pod in evicted:
        if state.pinned.pod(pod):
            return why(
                "do-not-disrupt",
                f"pod {pod.name} ({pod.workload}) is annotated {DO_NOT_DISRUPT_ANNOTATION}",
            )
    per_pdb: dict[str, int] = {}
    for pod in evicted:
        for name in state.pdbs_of(pod):
            per_pdb[name] = per_pdb.get(name, 0) + 1
    for name, count in sorted(per_pdb.items()):
        pdb = state.pdbs.get(name)
        if pdb is None:
            return why("pdb", f"PodDisruptionBudget {name} is unknown, so its pods are not evicted")
        allowed = pdb.allowed(state.pdb_running.get(name, 0))
        if allowed is not None and count > allowed:
            return why(
                "pdb",
                f"PodDisruptionBudget {name} allows {allowed} more disruption(s); "
                f"this would evict {count}",
                allowed=allowed,
                evicted=count,
            )
    if training:
        for unit, members in sorted(training_units(evicted).items()):
            stubborn = [p.name for p in members if not p.preemptible]
            if stubborn:
                return why(
                    "training",
                    f"gang {unit} is training and not preemptible "
                    f"({', '.join(stubborn[:3])}{'...' if len(stubborn) > 3 else ''}); "
                    "it is never disrupted to save money",
                )
    return None


def training_units(pods: Sequence[PodView]) -> dict[str, list[PodView]]:
    """Gangs (or lone pods) containing a training pod, by unit name."""
    units: dict[str, list[PodView]] = {}
    for pod in pods:
        units.setdefault(pod.unit, []).append(pod)
    return {u: ms for u, ms in units.items() if any(p.kind == "training" for p in ms)}


def requeue_gangs(evicted: Sequence[PodView]) -> tuple[str, ...]:
    """The gangs that restart as a whole (every evicted gang; lone pods just reschedule)."""
    return tuple(sorted({p.gang for p in evicted if p.gang is not None}))


def stable_since(node: NodeView, pods: Sequence[PodView]) -> float:
    """Since when the node's pods have not changed (consolidate-after counts from here)."""
    if not pods:
        return node.empty_since if node.empty_since is not None else node.launched_at
    if node.pods_changed_at is not None:
        return node.pods_changed_at
    return max([node.launched_at, *(p.started_at for p in pods)])


def disruption_cost(node: NodeView, state: State) -> tuple[int, int, float, float, str]:
    """Cheapest to disrupt first: fewer evicted pods, lower priority, younger pods, pricier
    node, then name."""
    evicted = state.expand(state.pods_on[node.name])
    age = sum(max(0.0, state.now - p.started_at) for p in evicted)
    return (len(evicted), sum(p.priority for p in evicted), age, -node.price_per_hour, node.name)


def busy_block(node: NodeView, state: State) -> Reason | None:
    """Already being disrupted, or not Ready/healthy (repair's business)."""
    if node.name in state.disrupting:
        return why("disrupting", "the node is already being disrupted")
    if not node.usable:
        return why("not-ready", "the node is not Ready/healthy (repair handles it)")
    return None


def node_pinned(node: NodeView, state: State) -> Reason | None:
    """The node's do-not-disrupt annotation."""
    if state.pinned.node(node):
        return why("do-not-disrupt", f"the node is annotated {DO_NOT_DISRUPT_ANNOTATION}")
    return None


def node_nominated(node: NodeView, state: State) -> Reason | None:
    """Pending work counts on the node's room (see ``NodeView.nominated_until``)."""
    until = node.nominated_until
    if until is not None and state.now < until:
        return why(
            "nominated",
            f"pending work counts on this node's room for {until - state.now:.0f}s more",
            left=until - state.now,
        )
    return None


def node_block(node: NodeView, state: State, *, nominated: bool = True) -> Reason | None:
    """Reasons any voluntary disruption of ``node`` is out of the question (``nominated``:
    including pending work counting on its room)."""
    if node.pool not in state.pools:
        return why("unknown-pool", f"node pool {node.pool} is not known")
    block = busy_block(node, state) or node_pinned(node, state)
    return block or (node_nominated(node, state) if nominated else None)


def floor_block(
    state: State, removed: Sequence[NodeView], added: Mapping[str, int]
) -> Reason | None:
    """Removing ``removed`` (and adding ``added`` per pool) would go below a pool's floor."""
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
            return why(
                "floor",
                f"pool {pool} must keep {floor} node(s); this would leave {after}",
                floor=floor,
                after=after,
            )
    return None


def budget_reason(pool: str, status: BudgetStatus) -> Reason:
    """The pool's budget allows no (more) disruption."""
    return why(
        "budget",
        f"pool {pool}: {status.description}",
        allowed=-1 if status.allowed is None else status.allowed,
    )


def budget_block(state: State, removed: Sequence[NodeView], ignore: Iterable[str]) -> Reason | None:
    """Removing ``removed`` at once exceeds a pool's budget."""
    by_pool: dict[str, int] = {}
    for node in removed:
        by_pool[node.pool] = by_pool.get(node.pool, 0) + 1
    ignored = set(ignore)
    for pool, count in sorted(by_pool.items()):
        status = state.budget(pool, ignored)
        if status.allowed is not None and count > status.allowed:
            return budget_reason(pool, status)
    return None


def missing_nodes(state: State, names: Sequence[str]) -> Reason | None:
    """Some of ``names`` are gone from the snapshot."""
    missing = [n for n in names if n not in state.nodes]
    if missing:
        return Reason("gone", f"node {', '.join(missing)} no longer exists")
    return None


def new_pod_block(state: State, removed: Sequence[NodeView], known: Iterable[str]) -> Reason | None:
    """A node of an earlier decision got a pod it did not know of (``known``) since."""
    expected = set(known)
    for node in removed:
        arrived = [p.name for p in state.pods_on[node.name] if p.name not in expected]
        if arrived:
            return Reason(
                "new-pod", f"node {node.name} got new pod {', '.join(arrived)} since the decision"
            )
    return None
