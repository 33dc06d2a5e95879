"""Compile a :class:`Policy` into per-(flavor, resource) quotas and limits.

The result, a :class:`QuotaModel`, is what the quota tree and the admission cycle read: every
team's and group's guaranteed quota, borrowing limit (absolute amounts and percentages of the
quota folded into one number), percent-of-idle limit and lending limit, keyed by
``(flavor, resource)``. HyperPod-style entries (Count, Accelerators, VCpu, MemoryInGiB,
AcceleratorPartition) are resolved against the instance catalog.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from fleetshare.model.catalog import (
    Catalog,
    InstanceType,
    ec2_name,
    mig_profiles,
    normalize_mig_profile,
)
from fleetshare.model.namespace import NamespaceLabels, labels_of
from fleetshare.model.node import Node, NodeSelectorRequirement
from fleetshare.model.quantity import MILLI, format_quantity, parse_quantity
from fleetshare.model.reason import PendingReason
from fleetshare.model.resources import CPU, MEMORY, MIG_PREFIX, PODS
from fleetshare.model.workload import PodSet, Workload
from fleetshare.placement.predicate import requirement_holds, selector_matches
from fleetshare.policy.schema import (
    DEFAULT_FLAVOR,
    BorrowLimit,
    BorrowWithinCohortPolicy,
    Flavor,
    Group,
    LabelSelector,
    LendingLimit,
    Policy,
    PolicyError,
    PreemptTeamTasks,
    QueueingStrategy,
    QuotaEntry,
    ReclaimPolicy,
    SharingStrategy,
    StopPolicy,
    Team,
)

FR = tuple[str, str]
"""A (flavor, resource) pair: the unit quotas are counted in."""

GiB = 2**30


@dataclass(frozen=True, slots=True)
class Limit:
    """A bound and where it came from, for messages ("50% of quota 2")."""

    amount: int
    why: str


@dataclass(frozen=True)
class QuotaNode:
    """A team or group in the quota tree; ``parent`` None means the cluster root."""

    name: str
    parent: str | None
    is_team: bool
    quota: dict[FR, int] = field(default_factory=dict)
    borrowing_limit: dict[FR, Limit] = field(default_factory=dict)
    idle_percent: dict[FR, float] = field(default_factory=dict)
    lending_limit: dict[FR, int] = field(default_factory=dict)
    can_borrow: bool = True
    can_lend: bool = True
    weight: float = 1.0
    """Its fair-sharing weight (a team's ``fair_share_weight``, a group's)."""

    def never_borrows(self, fr: FR) -> bool:
        """Whether it may never borrow ``fr`` beyond its quota, whatever the cluster does: its
        sharing strategy does not borrow, or its borrowing limit for ``fr`` is 0 (absolute,
        a share of quota, or 0 % of idle compute)."""
        limit = self.borrowing_limit.get(fr)
        return (
            not self.can_borrow
            or (limit is not None and limit.amount == 0)
            or self.idle_percent.get(fr) == 0
        )


@dataclass(frozen=True, slots=True)
class Transformation:
    """A compiled :class:`~fleetshare.policy.schema.ResourceTransformation`: per whole unit of
    the input, ``outputs`` (milli-units); ``replace``: the input itself is not counted."""

    outputs: tuple[tuple[str, int], ...]
    replace: bool
    multiply_by: str | None = None


@dataclass(frozen=True)
class Charging:
    """How a pod set's requests are charged to quota: the one place this is decided.

    Requests for resources excluded from quota are dropped (``cluster.
    excluded_resource_prefixes``), the cluster's resource transformations applied per pod (as
    Kueue computes a workload's requests), and each resource charged to the pod set's node
    flavor or, for a team's quota-only resource, to its own flavor (``flavors``). Nodes are
    asked for what the pods request, untouched."""

    flavors: Mapping[str, str] = field(default_factory=dict)
    """Quota-only resource -> the flavor its requests are charged to (``Team.quota_groups``)."""
    excluded: tuple[str, ...] = ()
    transformations: Mapping[str, Transformation] = field(default_factory=dict)

    def requests(self, requests: Mapping[str, int]) -> Mapping[str, int]:
        """A pod's requests as quota counts them (milli-units)."""
        if not self.excluded and not self.transformations:
            return requests
        excluded = self.excluded
        out: dict[str, int] = {}
        for name, amount in requests.items():
            if excluded and name.startswith(excluded):
                continue
            change = self.transformations.get(name)
            if change is None:
                out[name] = out.get(name, 0) + amount
                continue
            units = -(-amount // MILLI)  # whole units, rounded up (Kueue's Quantity.Value)
            if change.multiply_by is not None and change.multiply_by in requests:
                units *= -(-requests[change.multiply_by] // MILLI)
            for output, per_unit in change.outputs:
                out[output] = out.get(output, 0) + per_unit * units
            if not change.replace:
                out[name] = out.get(name, 0) + amount
        return out

    def usage(
        self, podset: PodSet, flavor: str, into: dict[FR, int] | None = None
    ) -> dict[FR, int]:
        """What ``podset`` counts in quota with its pods on ``flavor``, per (flavor, resource)
        (added to ``into`` when given, which is returned)."""
        flavors = self.flavors
        out: dict[FR, int] = {} if into is None else into
        count = podset.count
        for resource, amount in self.requests(podset.requests).items():
            key = (flavors.get(resource, flavor) if flavors else flavor, resource)
            out[key] = out.get(key, 0) + amount * count
        return out


NO_CHARGING = Charging()
"""Requests counted as they are, each on the pod set's flavor."""


@dataclass(frozen=True)
class NamespaceSelector:
    """A team's namespace selector (``Team.namespace_selector``): every label given and every
    requirement must hold (Kubernetes' label selector, matched by placement's one rule)."""

    labels: Mapping[str, str]
    requirements: tuple[NodeSelectorRequirement, ...]

    @classmethod
    def of(cls, selector: LabelSelector) -> NamespaceSelector:
        requirements = tuple(
            NodeSelectorRequirement(r.key, r.operator, tuple(r.values))
            for r in selector.match_expressions
        )
        return cls(dict(selector.match_labels), requirements)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Do a namespace's ``labels`` satisfy the selector?"""
        return selector_matches(labels, self.labels) and all(
            requirement_holds(labels, r) for r in self.requirements
        )


@dataclass(frozen=True)
class TeamRules:
    """A team's non-quota settings."""

    name: str
    weight: float
    preempt_team_tasks: PreemptTeamTasks
    reclaim: ReclaimPolicy
    enabled: bool
    sharing: SharingStrategy
    flavor_order: tuple[str, ...]
    flavors_listed: bool = False
    """Its work runs only on the flavors of ``flavor_order`` (``Team.flavors``); else on any
    flavor with nodes, those first."""
    covered: frozenset[str] | None = None
    """The only resources its work may request (None: any); see :meth:`unavailable`."""
    charging: Charging = NO_CHARGING
    """How its work's requests count in its quota (quota-only resources, the cluster's
    exclusions and transformations)."""
    strict_fifo: bool = False
    """StrictFIFO: the first of its workloads (in queue order) that cannot be admitted blocks
    the rest of its queue (``Team.queueing_strategy``)."""
    borrow_within: bool = False
    """Work that must borrow may preempt other teams' borrowing work of lower priority
    (``Team.borrow_within_cohort``; off with fair share, or when the team never reclaims)."""
    borrow_max_priority: int | None = None
    """With ``borrow_within``: only victims of at most this priority."""
    fair_admission: bool = False
    """Its queue is ordered by the usage of its local queues first (admission fair sharing)."""
    queue_weights: Mapping[str, float] = field(default_factory=dict)
    """Admission fair sharing weight per local queue (1 unless given)."""
    stop_at_borrowing: bool = True
    """The flavor search stops at the first flavor that fits by borrowing (``Team.
    flavor_fungibility.when_can_borrow: Borrow``); else a later one within quota is preferred."""
    stop_at_preemption: bool = False
    """The flavor search stops at the first flavor where preemption makes room
    (``when_can_preempt: Preempt``); else later flavors that fit are tried first."""
    stop: StopPolicy = StopPolicy.NONE
    """Its stop policy (``Team.stop_policy``): not None, it admits nothing."""
    queue_stops: Mapping[str, StopPolicy] = field(default_factory=dict)
    """Stop policies of its local queues (``Team.local_queue_stop_policies``)."""
    namespaces: NamespaceSelector | None = None
    """The namespaces whose work it admits (None: every one)."""

    @property
    def by_queue(self) -> bool:
        """Whether what is decided for its work depends on the work's local queue (admission
        fair sharing, a local queue's stop policy, a namespace selector): its pending work is
        grouped by it."""
        return self.fair_admission or bool(self.queue_stops) or self.namespaces is not None

    def outside(self, workload: Workload, namespaces: NamespaceLabels) -> bool:
        """Does its namespace selector refuse ``workload``'s namespace? (Work that names its
        team, not a local queue, has no namespace: never refused.)"""
        namespace = workload.namespace
        return (
            self.namespaces is not None
            and namespace is not None
            and not self.namespaces.matches(labels_of(namespace, namespaces))
        )

    def drains(self, workload: Workload) -> bool:
        """Is ``workload``, admitted, evicted by a HoldAndDrain stop policy (its team's or
        its local queue's)?"""
        if self.stop == StopPolicy.HOLD_AND_DRAIN:
            return True
        queue = workload.queue
        return queue is not None and self.queue_stops.get(queue) == StopPolicy.HOLD_AND_DRAIN

    def holds_queue(self, workload: Workload, namespaces: NamespaceLabels) -> bool:
        """Does ``workload``, not admitted, keep its place at the head of a StrictFIFO queue?
        Not when its local queue is stopped or its namespace is refused: Kueue keeps such work
        out of the ClusterQueue's queue, so it blocks nothing."""
        queue = workload.queue
        stopped = queue is not None and queue in self.queue_stops
        return not stopped and not self.outside(workload, namespaces)

    def refusal(self, workload: Workload, namespaces: NamespaceLabels) -> PendingReason | None:
        """Why ``workload`` may not be admitted in this team now, whatever quota and nodes
        say (None: it may be; a ``refused`` reason): its quota is disabled, it or the
        workload's local queue is stopped (Kueue: the ClusterQueue is inactive), or its
        namespace (with ``namespaces``' labels) is not among those the team admits. The one
        place these are decided: the cycle, the starvation guard and the demand count all ask
        it."""
        if not self.enabled:
            return PendingReason(
                f"team {self.name}'s quota is disabled", "refused", ("disabled", self.name)
            )
        if self.stop != StopPolicy.NONE:
            return PendingReason(
                f"{self.name} is inactive: its stop policy is {self.stop.value} (it admits no "
                "new work)",
                "refused",
                ("stopped", self.name, self.stop.value),
            )
        if self.queue_stops and workload.queue is not None:
            stop = self.queue_stops.get(workload.queue)
            if stop is not None and stop != StopPolicy.NONE:
                return PendingReason(
                    f"local queue {workload.queue} is inactive: its stop policy is "
                    f"{stop.value} (it admits no new work)",
                    "refused",
                    ("queue-stopped", workload.queue, stop.value),
                )
        if self.outside(workload, namespaces):
            return PendingReason(
                f"namespace {workload.namespace} does not match {self.name}'s namespace "
                "selector (Kueue: workload namespace doesn't match ClusterQueue selector)",
                "refused",
                ("namespace", workload.namespace, self.name),
            )
        return None

    @property
    def single_lane(self) -> bool:
        """Its queue is considered in its own order, not split into work within quota and
        the rest (StrictFIFO, admission fair sharing)."""
        return self.strict_fifo or self.fair_admission

    def unavailable(self, workload: Workload) -> PendingReason | None:
        """Why ``workload`` may not run in this team at all (a ``refused`` reason): it
        requests (a positive amount of) a resource the team does not cover; None when it
        covers them all.

        Kueue leaves such work pending ("resource ... unavailable in ClusterQueue")."""
        if self.covered is None:
            return None
        requests = self.charging.requests
        missing = sorted(
            {
                r
                for ps in workload.podsets
                for r, amount in requests(ps.requests).items()
                if amount > 0 and r not in self.covered
            }
        )
        if not missing:
            return None
        names = ", ".join(missing)
        return PendingReason(
            f"resource {names} unavailable in {self.name} (not among its covered resources)",
            "refused",
            ("unavailable", self.name, *missing),
        )


@dataclass(frozen=True)
class QuotaModel:
    """Quotas and limits of every team and group, per (flavor, resource)."""

    flavors: tuple[Flavor, ...]
    implicit_flavors: bool
    nodes: dict[str, QuotaNode]
    teams: dict[str, TeamRules]
    governed: frozenset[FR]
    quota_only: frozenset[str] = frozenset()
    """Resources counted as quota only (in some team's ``quota_groups``): not asked of nodes."""
    derived: frozenset[str] = frozenset()
    """Resources only resource transformations produce (their outputs, which pods do not
    request): quota has them, nodes do not offer them."""

    @property
    def not_offered(self) -> frozenset[str]:
        """Resources quota counts that no node is meant to offer (quota-only, derived)."""
        return self.quota_only | self.derived

    @cached_property
    def draining(self) -> tuple[str, ...]:
        """Teams a HoldAndDrain stop policy (theirs, or a local queue's) may drain work of."""
        drain = StopPolicy.HOLD_AND_DRAIN
        return tuple(
            name
            for name, rules in self.teams.items()
            if rules.stop == drain or drain in rules.queue_stops.values()
        )

    def ancestors(self, name: str) -> tuple[str, ...]:
        """The groups above a team or group, its parent first (the cluster root not named)."""
        out: list[str] = []
        parent = self.nodes[name].parent
        while parent is not None:
            out.append(parent)
            parent = self.nodes[parent].parent
        return tuple(out)

    @cached_property
    def fair_paths(self) -> dict[str, tuple[str, ...]]:
        """Per team, the nodes whose dominant shares order its work under fair sharing, from
        the top: the groups above it that may borrow (a group that can borrow nothing, as
        the Kueue importer's root cohort, always has share 0: left out), then the team."""
        out: dict[str, tuple[str, ...]] = {}
        for team in self.teams:
            groups = [g for g in reversed(self.ancestors(team)) if self._may_borrow(g)]
            out[team] = (*groups, team)
        return out

    @cached_property
    def fair_peers(self) -> dict[str, frozenset[str]]:
        """Per team, the teams whose fair-share order its usage moves: itself, and every team
        under a group of its :attr:`fair_paths` (that group's share moves)."""
        under: dict[str, set[str]] = {}
        for team, path in self.fair_paths.items():
            for node in path:
                under.setdefault(node, set()).add(team)
        return {
            team: frozenset(peer for node in path for peer in under[node])
            for team, path in self.fair_paths.items()
        }

    def below_common(self, a: str, b: str) -> tuple[str, str]:
        """The nodes just below where the paths up from ``a`` and ``b`` meet (Kueue's almost
        least common ancestors; ``a`` and ``b`` themselves when they share a parent)."""
        up_a = (a, *self.ancestors(a), "")
        up_b = (b, *self.ancestors(b), "")
        common = set(up_b)
        meet = next(i for i, node in enumerate(up_a) if node in common)
        return up_a[max(meet - 1, 0)], up_b[max(up_b.index(up_a[meet]) - 1, 0)]

    def _may_borrow(self, group: str) -> bool:
        limits = self.nodes[group].borrowing_limit
        return not self.governed or any(
            fr not in limits or limits[fr].amount > 0 for fr in self.governed
        )

    def _may_lend(self, name: str) -> bool:
        node = self.nodes[name]
        limits = node.lending_limit
        return node.can_lend and (
            not self.governed or any(fr not in limits or limits[fr] > 0 for fr in self.governed)
        )

    @cached_property
    def lenders(self) -> dict[str, frozenset[str]]:
        """Per team, the other teams whose quota its borrowing may take (and who may take it
        back): a team's quota goes up through the groups that may lend, up to the first that
        lends nothing (all of it: the cluster root), and its borrowing through the groups
        that may borrow, likewise; each must reach where the other stands. The Kueue
        importer's root cohorts, which borrow and lend nothing, keep their teams' quota among
        themselves."""

        def stop(team: str, may: Callable[[str], bool]) -> str | None:
            return next((g for g in self.ancestors(team) if not may(g)), None)

        under: dict[str | None, set[str]] = {}
        lent_to: dict[str | None, set[str]] = {}
        for team in self.teams:
            for node in (None, *self.ancestors(team)):
                under.setdefault(node, set()).add(team)
            if self._may_lend(team):
                lent_to.setdefault(stop(team, self._may_lend), set()).add(team)
        out: dict[str, frozenset[str]] = {}
        for team in self.teams:
            reach = under[stop(team, self._may_borrow)]
            found = set().union(*(lent_to.get(n, ()) for n in (None, *self.ancestors(team))))
            out[team] = frozenset((found & reach) - {team})
        return out

    @cached_property
    def _topology_levels(self) -> dict[str, tuple[str, ...] | None]:
        return {
            f.name: None if f.topology_levels is None else tuple(f.topology_levels)
            for f in self.flavors
        }

    def topology_refusal(self, flavor: str, podset: PodSet) -> PendingReason | None:
        """Why ``flavor`` cannot take ``podset``'s topology request (Kueue's
        checkPodSetAndFlavorMatchForTAS; a ``no-node`` reason), None when it can or the pod
        set asks for none."""
        level = podset.required_topology or podset.preferred_topology
        if level is None:
            return None
        levels = self._topology_levels.get(flavor)
        if levels is None:
            return None
        if not levels:
            return PendingReason(
                f"flavor {flavor} does not support topology-aware scheduling",
                "no-node",
                ("no-topology", flavor),
            )
        if level not in levels:
            return PendingReason(
                f"flavor {flavor} does not contain the requested level {level}",
                "no-node",
                ("no-level", flavor, level),
            )
        return None

    def flavor_of(self, node: Node) -> str | None:
        """The flavor a node's capacity counts in (None: none matches)."""
        if self.implicit_flavors:
            if len(self.flavors) == 1 and self.flavors[0].name == DEFAULT_FLAVOR:
                return DEFAULT_FLAVOR
            name = node.instance_type or DEFAULT_FLAVOR
            for flavor in self.flavors:
                if _same_instance_type(flavor.name, name):
                    return flavor.name
            return name
        labels = node.all_labels()
        best: Flavor | None = None
        for flavor in self.flavors:
            matches = all(labels.get(k) == v for k, v in flavor.node_labels.items())
            if matches and (best is None or len(flavor.node_labels) > len(best.node_labels)):
                best = flavor
        return best.name if best else None


def _same_instance_type(a: str, b: str) -> bool:
    return ec2_name(a) == ec2_name(b)


def _instance_for(flavor: str, catalog: Catalog | None) -> InstanceType:
    if catalog is None:
        raise KeyError(f"flavor {flavor!r}: count and accelerators quotas need the catalog")
    return catalog.get(flavor)


def _known_instance(flavor: str, catalog: Catalog | None) -> InstanceType | None:
    """The catalog's instance type a flavor names, if it names one."""
    if catalog is None or flavor not in catalog:
        return None
    return catalog.get(flavor)


def resolve_entry(entry: QuotaEntry, catalog: Catalog | None) -> dict[str, int]:
    """The resources (milli-units, zeros kept) that one quota entry guarantees.

    ``count`` is that many instances' allocatable. Otherwise the amounts given are kept, and
    vCPU and memory not given follow the entry's share of its instance type, as SageMaker's
    API model says of a ComputeQuotaResourceConfig: the share of accelerators ("if you
    allocate 16 out of 32 total accelerators, SageMaker AI uses the ratio of 0.5 and allocates
    values to vCPU and MemoryInGiB"), else of accelerator partitions, else of the vCPU given
    (memory follows; "Accelerators are set to 0"), else of the memory given (vCPU follows;
    accelerators 0). A flavor the catalog does not know gets no companion amounts.
    """
    out: dict[str, int] = {name: parse_quantity(v) for name, v in entry.resources.items()}
    needs_instance = entry.count is not None or entry.accelerators is not None
    instance = (
        _instance_for(entry.flavor, catalog)
        if needs_instance
        else _known_instance(entry.flavor, catalog)
    )
    if entry.count is not None and instance is not None:
        for name, amount in instance.allocatable.items():
            if name != PODS:
                out[name] = out.get(name, 0) + amount * entry.count
        return out
    given: dict[str, int] = {}
    if entry.accelerators is not None and instance is not None:
        accel = instance.accelerator_resource
        if accel is None or instance.allocatable.get(accel, 0) < MILLI:
            raise ValueError(f"instance type {entry.flavor} has no accelerators")
        given[accel] = entry.accelerators * MILLI
    if entry.accelerator_partition is not None:
        name = normalize_mig_profile(entry.accelerator_partition.type)
        if instance is not None:
            profiles = mig_profiles(instance)
            if name not in profiles:
                offered = ", ".join(p.removeprefix("nvidia.com/") for p in profiles) or "none"
                raise ValueError(
                    f"instance type {entry.flavor} has no MIG profile "
                    f"{name.removeprefix('nvidia.com/')} (its GPUs offer: {offered})"
                )
        given[name] = entry.accelerator_partition.count * MILLI
    if entry.vcpu is not None:
        given[CPU] = round(entry.vcpu * MILLI)
    if entry.memory_gib is not None:
        given[MEMORY] = round(entry.memory_gib * GiB) * MILLI
    if instance is not None:
        given = _with_companions(given, instance)
    for name, amount in given.items():
        out[name] = out.get(name, 0) + amount
    return out


def _with_companions(given: Mapping[str, int], instance: InstanceType) -> dict[str, int]:
    """``given`` plus the vCPU and memory it leaves out, at the share of ``instance`` that its
    first share-giving amount (accelerators, partitions, vCPU, memory) makes; accelerators 0
    when only vCPU or memory is given (:func:`resolve_entry`)."""
    out = dict(given)
    whole = dict(instance.allocatable)
    for name, count in mig_profiles(instance).items():
        whole[name] = count * instance.gpu_count * MILLI
    accel = instance.accelerator_resource
    partitions = [name for name in given if name.startswith(MIG_PREFIX)]
    basis = next(
        (
            name
            for name in ([accel] if accel else []) + partitions + [CPU, MEMORY]
            if name in given and whole.get(name, 0) > 0
        ),
        None,
    )
    if basis is None:
        return out
    for name in (CPU, MEMORY):
        if name not in out and name in whole:
            out[name] = whole[name] * given[basis] // whole[basis]
    if basis in (CPU, MEMORY) and accel is not None and whole.get(accel, 0) > 0:
        out.setdefault(accel, 0)
    return out


def _quotas(
    entries: Iterable[QuotaEntry],
    catalog: Catalog | None,
    path: str,
    problems: list[tuple[str, str]],
) -> dict[FR, int]:
    quota: dict[FR, int] = {}
    for i, entry in enumerate(entries):
        try:
            resolved = resolve_entry(entry, catalog)
        except (KeyError, ValueError) as exc:
            problems.append((f"{path}.quota[{i}]", str(exc).strip('"')))
            continue
        for resource, amount in resolved.items():
            key = (entry.flavor, resource)
            quota[key] = quota.get(key, 0) + amount
    return quota


def _matches(scope: BorrowLimit | LendingLimit, fr: FR) -> bool:
    flavor, resource = fr
    flavor_ok = scope.flavor in ("*", flavor) or _same_instance_type(scope.flavor, flavor)
    return flavor_ok and scope.resource in ("*", resource)


def _borrow_limits(
    limits: Sequence[BorrowLimit], quota: Mapping[FR, int], governed: Iterable[FR]
) -> tuple[dict[FR, Limit], dict[FR, float]]:
    absolute: dict[FR, Limit] = {}
    idle: dict[FR, float] = {}
    for fr in governed:
        for limit in (lim for lim in limits if _matches(lim, fr)):
            bounds: list[Limit] = []
            if limit.absolute is not None:
                amount = parse_quantity(limit.absolute)
                bounds.append(Limit(amount, f"absolute {format_quantity(amount, fr[1])}"))
            if limit.percent_of_quota is not None:
                own = quota.get(fr, 0)
                amount = int(own * limit.percent_of_quota) // 100
                why = f"{limit.percent_of_quota:g}% of quota {format_quantity(own, fr[1])}"
                bounds.append(Limit(amount, why))
            for bound in bounds:
                if fr not in absolute or bound.amount < absolute[fr].amount:
                    absolute[fr] = bound
            if limit.percent_of_idle is not None:
                idle[fr] = min(idle.get(fr, 100.0), limit.percent_of_idle)
    return absolute, idle


def _lending_limits(limits: Sequence[LendingLimit], governed: Iterable[FR]) -> dict[FR, int]:
    out: dict[FR, int] = {}
    for fr in governed:
        for limit in (lim for lim in limits if _matches(lim, fr)):
            amount = parse_quantity(limit.absolute)
            out[fr] = min(out.get(fr, amount), amount)
    return out


def _scoped_frs(owners: Sequence[Team | Group]) -> set[FR]:
    out: set[FR] = set()
    for owner in owners:
        for lim in [*owner.borrow_limits, *owner.lending_limits]:
            if lim.flavor != "*" and lim.resource != "*":
                out.add((lim.flavor, lim.resource))
    return out


def _flavors(policy: Policy, quota_flavors: set[str]) -> tuple[tuple[Flavor, ...], bool]:
    if policy.cluster.flavors:
        return tuple(policy.cluster.flavors), False
    if quota_flavors <= {DEFAULT_FLAVOR}:
        return (Flavor(name=DEFAULT_FLAVOR),), True
    if DEFAULT_FLAVOR in quota_flavors:
        raise PolicyError(
            [
                (
                    "teams[*].quota[*].instance_type",
                    "some quotas name an instance type and others do not; give every quota an "
                    "instance_type, or define cluster.flavors",
                )
            ]
        )
    return tuple(Flavor(name=name) for name in sorted(quota_flavors)), True


def _limit_flavors_known(policy: Policy, catalog: Catalog, quota_flavors: set[str]) -> None:
    """With instance types as flavors, a borrow or lending limit must name one a quota names
    or one in the catalog: a typo would govern a flavor no node belongs to (PolicyError)."""
    problems: list[tuple[str, str]] = []
    owners: list[tuple[str, Sequence[Team | Group]]] = [
        ("groups", policy.groups),
        ("teams", policy.teams),
    ]
    for kind, members in owners:
        for i, owner in enumerate(members):
            for field_name in ("borrow_limits", "lending_limits"):
                for j, lim in enumerate(getattr(owner, field_name)):
                    flavor = lim.flavor
                    if flavor in ("*", DEFAULT_FLAVOR) or flavor in quota_flavors:
                        continue
                    if flavor not in catalog:
                        where = f"{kind}[{i}]({owner.name}).{field_name}[{j}].flavor"
                        try:
                            catalog.get(flavor)
                        except KeyError as exc:
                            problems.append((where, str(exc)))
    if problems:
        raise PolicyError(problems)


def compile_policy(
    policy: Policy, catalog: Catalog | None, also_govern: Iterable[FR] = ()
) -> QuotaModel:
    """Resolve a policy into a :class:`QuotaModel`; raises PolicyError naming bad fields.

    ``also_govern``: (flavor, resource) pairs no quota names that are governed all the same,
    with no team holding any of them (the nodes' pairs, under ``unnamed_capacity:
    unallocated``: see :func:`govern_nodes`)."""
    problems: list[tuple[str, str]] = []
    group_quota = {
        g.name: _quotas(g.quota, catalog, f"groups[{i}]({g.name})", problems)
        for i, g in enumerate(policy.groups)
    }
    team_quota = {
        t.name: _quotas(t.quota, catalog, f"teams[{i}]({t.name})", problems)
        for i, t in enumerate(policy.teams)
    }
    if problems:
        raise PolicyError(problems)
    all_quota = [*group_quota.values(), *team_quota.values()]
    governed = {fr for quota in all_quota for fr in quota}
    # a disabled team's quota is not in force: it holds nothing (the capacity is unallocated),
    # though what it names stays governed
    team_quota.update({t.name: {} for t in policy.teams if not t.enabled})
    governed |= _scoped_frs([*policy.teams, *policy.groups])
    governed |= set(also_govern)
    flavors, implicit = _flavors(policy, {f for f, _ in governed})
    known = {f.name for f in flavors}
    if implicit and catalog is not None:
        _limit_flavors_known(policy, catalog, {f for quota in all_quota for f, _ in quota})
    if not implicit:
        unknown = sorted({f for f, _ in governed} - known)
        if unknown:
            raise PolicyError([("cluster.flavors", f"quotas name undefined flavors: {unknown}")])

    quota_flavors = {g.flavor for t in policy.teams for g in t.quota_groups}
    if not implicit:
        unknown = sorted(quota_flavors - known)
        if unknown:
            raise PolicyError([("teams[*].quota_groups", f"undefined flavors: {unknown}")])
    excluded = tuple(policy.cluster.excluded_resource_prefixes)
    transformations = {
        t.input: Transformation(
            tuple((name, parse_quantity(v)) for name, v in t.outputs.items()),
            t.strategy == "Replace",
            t.multiply_by,
        )
        for t in policy.cluster.resource_transformations
    }
    nodes: dict[str, QuotaNode] = {}
    for g in policy.groups:
        borrow, idle = _borrow_limits(g.borrow_limits, group_quota[g.name], governed)
        lend = _lending_limits(g.lending_limits, governed)
        nodes[g.name] = QuotaNode(
            g.name,
            g.parent,
            False,
            group_quota[g.name],
            borrow,
            idle,
            lend,
            weight=g.fair_share_weight,
        )
    teams: dict[str, TeamRules] = {}
    for t in policy.teams:
        quota = team_quota[t.name]
        borrow, idle = _borrow_limits(t.borrow_limits, quota, governed)
        lend = _lending_limits(t.lending_limits, governed)
        can_borrow = t.sharing == SharingStrategy.LEND_AND_BORROW
        can_lend = t.sharing != SharingStrategy.DONT_LEND
        if not can_borrow:
            borrow = {
                fr: Limit(0, f"strategy {t.sharing.value} does not borrow") for fr in governed
            }
            idle = {}
        if not can_lend:
            lend = dict.fromkeys(governed, 0)
        nodes[t.name] = QuotaNode(
            t.name,
            t.group,
            True,
            quota,
            borrow,
            idle,
            lend,
            can_borrow,
            can_lend,
            t.fair_share_weight,
        )
        own_order = list(dict.fromkeys(e.flavor for e in t.quota))
        rest = sorted(known - set(own_order))
        charging = Charging(
            {r: g.flavor for g in t.quota_groups for r in g.resources}, excluded, transformations
        )
        listed = own_order + rest if t.flavors is None else t.flavors
        node_order = [f for f in listed if f not in quota_flavors]
        borrow_within = (
            t.borrow_within_cohort.policy == BorrowWithinCohortPolicy.LOWER_PRIORITY
            and t.reclaim != ReclaimPolicy.NEVER
            and not policy.cluster.fair_share
        )
        fair_admission = (
            t.admission_fair_sharing and policy.cluster.admission_fair_sharing is not None
        )
        teams[t.name] = TeamRules(
            name=t.name,
            weight=t.fair_share_weight,
            preempt_team_tasks=t.preempt_team_tasks,
            reclaim=t.reclaim,
            enabled=t.enabled,
            sharing=t.sharing,
            flavor_order=tuple(node_order),
            flavors_listed=t.flavors is not None,
            covered=None if t.covered_resources is None else frozenset(t.covered_resources),
            charging=charging,
            strict_fifo=t.queueing_strategy == QueueingStrategy.STRICT_FIFO,
            borrow_within=borrow_within,
            borrow_max_priority=t.borrow_within_cohort.max_priority_threshold,
            fair_admission=fair_admission,
            queue_weights=dict(t.local_queue_weights),
            stop_at_borrowing=t.flavor_fungibility.when_can_borrow == "Borrow",
            stop_at_preemption=t.flavor_fungibility.when_can_preempt == "Preempt",
            stop=t.stop_policy,
            namespaces=None
            if t.namespace_selector is None
            else NamespaceSelector.of(t.namespace_selector),
            queue_stops={
                q: s for q, s in t.local_queue_stop_policies.items() if s != StopPolicy.NONE
            },
        )
    quota_only = frozenset(r for t in policy.teams for g in t.quota_groups for r in g.resources)
    node_flavors = tuple(f for f in flavors if f.name not in quota_flavors)
    derived = frozenset(o for t in transformations.values() for o, _ in t.outputs)
    return QuotaModel(
        node_flavors, implicit, nodes, teams, frozenset(governed), quota_only, derived
    )


def govern_nodes(
    model: QuotaModel, policy: Policy, catalog: Catalog | None, nodes: Iterable[Node]
) -> QuotaModel:
    """``model`` governing the nodes' capacity too, when the policy says capacity no quota
    names is unallocated (``cluster.unnamed_capacity``): each (flavor, resource) the nodes
    offer is governed with no quota for anyone, so it is idle compute, used only by borrowing
    (HyperPod: a team holds only what its compute allocation names). ``model`` itself when
    nothing is new: pairs once governed stay governed (a flavor whose nodes left has no
    capacity to lend)."""
    if policy.cluster.unnamed_capacity != "unallocated":
        return model
    offered = {
        (flavor, resource)
        for node in nodes
        if (flavor := model.flavor_of(node)) is not None
        for resource in node.allocatable
        if resource != PODS
    }
    if offered <= model.governed:
        return model
    return compile_policy(policy, catalog, model.governed | offered)
