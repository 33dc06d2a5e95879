"""fleetshare's policy format, validated with pydantic.

A :class:`Policy` is what an admin writes (or what an importer produces): cluster-wide
settings, optional groups (nested cohorts) and teams with their guaranteed quotas, sharing
strategy and limits. Quantities stay as strings/numbers here; :mod:`fleetshare.governance.quota`
resolves them against the nodes and the instance catalog.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from fleetshare.inputs import Count, Name, StrictModel, check_name
from fleetshare.model.placement import Placement
from fleetshare.model.quantity import QuantityError, check_quantities, parse_quantity
from fleetshare.policy.errors import PolicyError as PolicyError

Quantity = str | int | float
DEFAULT_FLAVOR = "default"


class _Strict(StrictModel):
    model_config = ConfigDict(frozen=True)


def _check_quantity(value: Quantity | None) -> Quantity | None:
    if value is not None:
        try:
            parse_quantity(value)
        except QuantityError as exc:
            raise ValueError(str(exc)) from None
    return value


class SharingStrategy(StrEnum):
    """HyperPod's ResourceSharingConfig.Strategy.

    LendAndBorrow lends unused quota and borrows idle capacity; Lend only lends; DontLend
    neither lends nor borrows (to borrow without lending, use LendAndBorrow with a lending
    limit of 0).
    """

    LEND = "Lend"
    DONT_LEND = "DontLend"
    LEND_AND_BORROW = "LendAndBorrow"


class PreemptTeamTasks(StrEnum):
    """Whether a team's work may preempt the team's own lower-priority work."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


class ReclaimPolicy(StrEnum):
    """Which borrowers a team may preempt to get its lent quota back (Kueue reclaimWithinCohort)."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class QueueingStrategy(StrEnum):
    """How a team's queue treats work that cannot be admitted (Kueue ``queueingStrategy``).

    Both order the queue by priority, then submit time. With BestEffortFIFO a workload that
    does not fit is skipped and newer work behind it may run; with StrictFIFO it blocks the
    team's newer work (of its priority or lower) until it is admitted.
    """

    BEST_EFFORT_FIFO = "BestEffortFIFO"
    STRICT_FIFO = "StrictFIFO"


class StopPolicy(StrEnum):
    """Kueue ``stopPolicy`` of a ClusterQueue (a team) or a LocalQueue: Hold admits no new
    work and lets admitted work run to completion; HoldAndDrain also evicts admitted work
    (it waits again, not admitted while the stop holds)."""

    NONE = "None"
    HOLD = "Hold"
    HOLD_AND_DRAIN = "HoldAndDrain"


class BorrowWithinCohortPolicy(StrEnum):
    """Kueue ``preemption.borrowWithinCohort.policy``."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class BorrowWithinCohort(_Strict):
    """May work that must borrow preempt other teams' borrowing work (Kueue
    ``preemption.borrowWithinCohort``)? Only work of a priority below the preemptor's and,
    with ``max_priority_threshold``, at most that priority; only without fair share (as in
    Kueue, where it belongs to classic preemption), and only for a team whose ``reclaim``
    policy is not Never."""

    policy: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER
    max_priority_threshold: int | None = Field(
        default=None,
        description="only work of at most this priority (a priority class weight) may be "
        "preempted; none: any priority below the preemptor's",
    )


class FlavorFungibility(_Strict):
    """Where the search for a flavor stops (Kueue ``flavorFungibility``, its defaults by
    default). Flavors are tried in the team's order:

    - ``when_can_borrow``: ``Borrow`` stops at the first flavor whose quota takes the work by
      borrowing; ``TryNextFlavor`` goes on to a later flavor that takes it without borrowing
      (and borrows only when none does).
    - ``when_can_preempt``: ``Preempt`` stops at the first flavor where preempting makes room
      (and preempts there); ``TryNextFlavor`` first tries every later flavor that fits without
      preempting.

    A flavor whose quota fits but whose nodes cannot hold the pods is passed over (fleetshare
    places pods at admission; Kueue would admit and leave them pending).
    """

    when_can_borrow: Literal["Borrow", "TryNextFlavor"] = "Borrow"
    when_can_preempt: Literal["Preempt", "TryNextFlavor"] = "TryNextFlavor"


class AdmissionFairSharing(_Strict):
    """How the usage of local queues is measured for admission fair sharing (Kueue
    Configuration ``admissionFairSharing``); teams opt in with ``admission_fair_sharing``.

    A local queue's usage is sampled every ``usage_sampling_seconds``: consumed = (1 − a) ×
    consumed + a × the requests of its running work, a = 1 − 0.5^(elapsed / half-life); every
    admission adds an entry penalty, a(sampling) × the workload's requests, at once. Its score
    is Σ weight(resource) × (consumed + penalty) in base units (cores, bytes, devices; weight
    1 unless given) ÷ the local queue's weight."""

    usage_half_life_seconds: float = Field(
        default=0, ge=0, description="0: usage is forgotten at once (only the order remains)"
    )
    usage_sampling_seconds: float = Field(default=300, gt=0)
    resource_weights: dict[str, float] = Field(default_factory=dict)

    @field_validator("resource_weights")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        negative = sorted(name for name, weight in value.items() if weight < 0)
        if negative:
            raise ValueError(f"weights must not be negative: {', '.join(negative)}")
        return value


class LabelRequirement(_Strict):
    """One ``matchExpressions`` entry of a label selector (Kubernetes' operators)."""

    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values(self) -> LabelRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelector(_Strict):
    """A Kubernetes label selector: every ``match_labels`` entry and every
    ``match_expressions`` requirement must hold; an empty selector matches everything."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelRequirement] = Field(default_factory=list)


class ResourceTransformation(_Strict):
    """How a pod's request for ``input`` counts in quota (Kueue Configuration
    ``resources.transformations``): each whole unit of it (the request rounded up, times the
    pod's whole units of ``multiply_by`` when given) adds ``outputs`` (amounts per unit); with
    strategy Replace the input itself is not counted, with Retain it is, besides. Nodes are
    still asked for what the pod requests."""

    input: str = Field(min_length=1)
    strategy: Literal["Retain", "Replace"] = "Retain"
    outputs: dict[str, Quantity] = Field(default_factory=dict)
    multiply_by: str | None = Field(default=None, min_length=1)

    @field_validator("outputs")
    @classmethod
    def _quantities(cls, value: dict[str, Quantity]) -> dict[str, Quantity]:
        check_quantities(value)
        return value


class PriorityClass(_Strict):
    """A named priority; higher weight is admitted first and may preempt lower."""

    name: Name
    weight: int = Field(ge=0, le=100)
    default: bool = False


class Flavor(_Strict):
    """A kind of node quotas are counted on; a node belongs to the most specific matching flavor."""

    name: Name
    node_labels: dict[str, str] = Field(default_factory=dict)
    topology_levels: list[str] | None = Field(
        default=None,
        description="the node labels of the flavor's topology levels, widest first (a Kueue "
        "Topology named by the ResourceFlavor's topologyName); a pod set's required or "
        "preferred topology must be one of them, or the flavor does not admit it. None: any "
        "node label is a level (fleetshare's own); []: no topology (Kueue's flavor without "
        "topologyName), so a pod set asking for one is not admitted here",
    )


class PreemptionSettings(_Strict):
    """Guards against preemption thrashing."""

    min_runtime_seconds: float = Field(
        default=0,
        ge=0,
        description="work younger than this is never preempted for priority or fair share",
    )
    reclaim_grace_seconds: float = Field(
        default=0, ge=0, description="borrowed work younger than this is not reclaimed"
    )


class ClusterPolicy(_Strict):
    """Cluster-wide settings (HyperPod's cluster scheduler config, plus fleetshare's own)."""

    priority_classes: list[PriorityClass] = Field(default_factory=list, max_length=10)
    fair_share: bool = True
    idle_resource_sharing: bool = True
    flavors: list[Flavor] = Field(default_factory=list)
    preemption: PreemptionSettings = Field(default_factory=PreemptionSettings)
    starvation_guard_seconds: float | None = Field(
        default=600,
        ge=0,
        description="a workload pending longer than this holds back the resources it needs from "
        "later, not-higher-priority work (null: never)",
    )
    admission_fair_sharing: AdmissionFairSharing | None = Field(
        default=None,
        description="usage measurement for teams with admission_fair_sharing (null: off)",
    )
    unnamed_capacity: Literal["ungoverned", "unallocated"] = Field(
        default="ungoverned",
        description="capacity of a flavor (instance type) that no quota names: ungoverned (any "
        "team may use it, counted in no quota) or unallocated (idle compute no team holds, "
        "used only by borrowing: with idle_resource_sharing, by teams that may borrow, within "
        "their borrow limits; HyperPod governs every instance type of the cluster so)",
    )
    resource_transformations: list[ResourceTransformation] = Field(
        default_factory=list,
        description="how pod requests count in quota (Kueue's resources.transformations): "
        "one per input resource",
    )
    excluded_resource_prefixes: list[str] = Field(
        default_factory=list,
        description="resources whose name starts with one of these are not counted in quota "
        "(Kueue's resources.excludeResourcePrefixes); nodes are still asked for them",
    )
    placement: Placement = Field(
        default="default",
        description="how admitted pods are placed on nodes and GPUs: default (a pod set on the "
        "tightest node that holds it, else spread over the roomiest), first_fit, best_fit or "
        "fgd (fragmentation gradient descent); see docs/architecture.md",
    )

    @field_validator("resource_transformations")
    @classmethod
    def _one_per_input(cls, value: list[ResourceTransformation]) -> list[ResourceTransformation]:
        inputs = [t.input for t in value]
        dupes = sorted({i for i in inputs if inputs.count(i) > 1})
        if dupes:
            raise ValueError(f"one transformation per input resource; repeated: {', '.join(dupes)}")
        return value

    @field_validator("priority_classes")
    @classmethod
    def _unique_classes(cls, value: list[PriorityClass]) -> list[PriorityClass]:
        names = [pc.name for pc in value]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"priority class names must be unique; repeated: {', '.join(dupes)}")
        if sum(pc.default for pc in value) > 1:
            raise ValueError("at most one priority class may be the default")
        return value


MAX_AMOUNT = 1e9
"""The largest ``vcpu`` or ``memory_gib`` of a quota entry (a billion: far above any cluster)."""


class AcceleratorPartition(_Strict):
    """A MIG profile and how many partitions of it."""

    type: str = Field(min_length=1, description="MIG profile, e.g. mig-1g.10gb")
    count: Count = Field(ge=0)


class QuotaEntry(_Strict):
    """Guaranteed quota on one flavor (instance type).

    Either ``count`` whole instances, or any of accelerators / vcpu / memory_gib /
    accelerator_partition / explicit ``resources``. vCPU and memory not given follow the
    entry's share of the instance, as HyperPod allocates them: the share of its accelerators,
    else of its accelerator partitions, else of the vCPU or memory given (accelerators then 0).
    """

    flavor: str = Field(
        default=DEFAULT_FLAVOR,
        min_length=1,
        validation_alias=AliasChoices("flavor", "instance_type"),
    )
    count: Count | None = Field(default=None, ge=0)
    accelerators: Count | None = Field(default=None, ge=0)
    vcpu: float | None = Field(default=None, ge=0, le=MAX_AMOUNT)
    memory_gib: float | None = Field(default=None, ge=0, le=MAX_AMOUNT)
    accelerator_partition: AcceleratorPartition | None = None
    resources: dict[str, Quantity] = Field(default_factory=dict)

    @field_validator("resources")
    @classmethod
    def _quantities(cls, value: dict[str, Quantity]) -> dict[str, Quantity]:
        check_quantities(value)
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> QuotaEntry:
        others = [
            self.accelerators is not None,
            self.vcpu is not None,
            self.memory_gib is not None,
            self.accelerator_partition is not None,
            bool(self.resources),
        ]
        if self.count is not None and any(others):
            raise ValueError("count gives whole instances; do not combine it with other amounts")
        if self.count is None and not any(others):
            raise ValueError(
                "give count, accelerators, vcpu, memory_gib, accelerator_partition or resources"
            )
        return self


class LimitScope(_Strict):
    """Which (flavor, resource) pairs a limit covers; ``*`` or absent means all."""

    resource: str = Field(default="*", min_length=1)
    flavor: str = Field(
        default="*", min_length=1, validation_alias=AliasChoices("flavor", "instance_type")
    )


class BorrowLimit(LimitScope):
    """How much a team may borrow; every given bound applies and the tightest wins."""

    absolute: Quantity | None = None
    percent_of_quota: float | None = Field(default=None, ge=0, le=10000)
    percent_of_idle: float | None = Field(
        default=None,
        ge=0,
        le=10000,
        description="percent of the idle pool; above 100 it never binds (a team cannot borrow "
        "more than is idle), as HyperPod's BorrowLimit allows (1-500 by its docs, up to 10000 "
        "by its API model)",
    )

    _abs = field_validator("absolute")(_check_quantity)

    @model_validator(mode="after")
    def _some_bound(self) -> BorrowLimit:
        if self.absolute is None and self.percent_of_quota is None and self.percent_of_idle is None:
            raise ValueError("give absolute, percent_of_quota or percent_of_idle")
        return self


class LendingLimit(LimitScope):
    """At most this much of the team's unused quota may be lent; the rest stays private."""

    absolute: Quantity

    _abs = field_validator("absolute")(_check_quantity)


class Group(_Strict):
    """A group of teams (a cohort); may nest, hold quota of its own and limit its borrowing."""

    name: Name
    parent: str | None = None
    quota: list[QuotaEntry] = Field(default_factory=list)
    borrow_limits: list[BorrowLimit] = Field(default_factory=list)
    lending_limits: list[LendingLimit] = Field(default_factory=list)
    fair_share_weight: float = Field(
        default=1.0,
        ge=0,
        description="with fair share, how the group's dominant share is weighted against its "
        "siblings' (Kueue's Cohort fairSharing.weight): its share is divided by it",
    )


class QuotaGroup(_Strict):
    """Resources counted as quota only, on a flavor of their own (Kueue: a resource group
    besides the one of node resources, such as licences or credits).

    A workload's request for them is charged to ``(flavor, resource)`` whatever node flavor
    its pods get, and is not asked of nodes (no node offers them).
    """

    resources: list[str] = Field(min_length=1)
    flavor: str = Field(min_length=1)


class Team(_Strict):
    """A team: its guaranteed quota and how it shares."""

    name: Name
    group: str | None = None
    quota: list[QuotaEntry] = Field(default_factory=list)
    sharing: SharingStrategy = SharingStrategy.LEND_AND_BORROW
    borrow_limits: list[BorrowLimit] = Field(default_factory=list)
    lending_limits: list[LendingLimit] = Field(default_factory=list)
    fair_share_weight: float = Field(default=1.0, ge=0)
    preempt_team_tasks: PreemptTeamTasks = PreemptTeamTasks.LOWER_PRIORITY
    reclaim: ReclaimPolicy = ReclaimPolicy.ANY
    enabled: bool = True
    stop_policy: StopPolicy = Field(
        default=StopPolicy.NONE,
        description="Hold: admit no new work (admitted work runs on); HoldAndDrain: also "
        "evict admitted work (Kueue ClusterQueue stopPolicy). Unlike enabled: false, the "
        "quota stays in force and lendable",
    )
    local_queues: list[str] = Field(
        default_factory=list,
        description="queues (Kueue LocalQueue 'namespace/name') whose jobs belong to this team",
    )
    namespace_selector: LabelSelector | None = Field(
        default=None,
        description="the namespaces whose work (through a local queue 'namespace/name') the "
        "team admits, by their labels (Kueue ClusterQueue namespaceSelector; every namespace "
        "carries kubernetes.io/metadata.name: its name); other work waits. None: every "
        "namespace",
    )
    flavors: list[str] | None = Field(
        default=None,
        description="the only node flavors the team's work may run on, in the order they are "
        "tried (Kueue: the flavors its ClusterQueue's resource group lists). None: any flavor "
        "with nodes, the team's own first",
    )
    covered_resources: list[str] | None = Field(
        default=None,
        description="the only resources the team's work may request (Kueue coveredResources); "
        "work asking for a positive amount of any other waits. None: any resource",
    )
    quota_groups: list[QuotaGroup] = Field(
        default_factory=list,
        description="resources counted as quota only, each group on its own flavor",
    )
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    borrow_within_cohort: BorrowWithinCohort = Field(default_factory=BorrowWithinCohort)
    flavor_fungibility: FlavorFungibility = Field(default_factory=FlavorFungibility)
    admission_fair_sharing: bool = Field(
        default=False,
        description="order the team's work by the usage of its local queues first (Kueue "
        "admissionScope UsageBasedAdmissionFairSharing; cluster.admission_fair_sharing says how "
        "usage is measured)",
    )
    local_queue_weights: dict[str, float] = Field(
        default_factory=dict,
        description="admission fair sharing weight per local queue ('namespace/name'; 1 "
        "unless given): usage counts divided by it",
    )
    local_queue_stop_policies: dict[str, StopPolicy] = Field(
        default_factory=dict,
        description="stop policy per local queue ('namespace/name'; Kueue LocalQueue "
        "stopPolicy): Hold or HoldAndDrain, as the team's stop_policy, for that queue's work",
    )

    @model_validator(mode="after")
    def _groups(self) -> Team:
        seen: set[str] = set()
        for group in self.quota_groups:
            again = sorted(seen & set(group.resources))
            if again:
                raise ValueError(f"quota_groups: {', '.join(again)} in more than one group")
            seen |= set(group.resources)
        if self.covered_resources is not None:
            missing = sorted(seen - set(self.covered_resources))
            if missing:
                raise ValueError(
                    f"quota_groups: {', '.join(missing)} not listed in covered_resources"
                )
        if (
            self.borrow_within_cohort.policy != BorrowWithinCohortPolicy.NEVER
            and self.reclaim == ReclaimPolicy.NEVER
        ):
            raise ValueError(
                "borrow_within_cohort needs a reclaim policy other than Never (as in Kueue)"
            )
        for field_name in ("local_queue_weights", "local_queue_stop_policies"):
            unknown = sorted(set(getattr(self, field_name)) - set(self.local_queues))
            if unknown:
                raise ValueError(f"{field_name}: not among local_queues: {', '.join(unknown)}")
        negative = sorted(q for q, w in self.local_queue_weights.items() if w < 0)
        if negative:
            raise ValueError(f"local_queue_weights must not be negative: {', '.join(negative)}")
        return self


class Policy(_Strict):
    """The whole governance policy."""

    cluster: ClusterPolicy = Field(default_factory=ClusterPolicy)
    groups: list[Group] = Field(default_factory=list)
    teams: list[Team] = Field(default_factory=list)
    notes: list[str] = Field(
        default_factory=list, description="what an importer mapped or could not map"
    )

    @model_validator(mode="after")
    def _references(self) -> Policy:
        problems: list[str] = []
        group_names = [g.name for g in self.groups]
        team_names = [t.name for t in self.teams]
        for kind, names in (("group", group_names), ("team", team_names)):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                problems.append(f"{kind} names must be unique; repeated: {', '.join(dupes)}")
        known = set(group_names)
        for g in self.groups:
            if g.parent is not None and g.parent not in known:
                problems.append(f"group {g.name}: parent {g.parent!r} is not a group")
        for t in self.teams:
            if t.group is not None and t.group not in known:
                problems.append(f"team {t.name}: group {t.group!r} is not a group")
        parents = {g.name: g.parent for g in self.groups}
        for start in parents:
            seen: set[str] = set()
            node: str | None = start
            while node is not None:
                if node in seen:
                    problems.append(f"group {start}: parent chain forms a cycle")
                    break
                seen.add(node)
                node = parents.get(node)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def default_priority(self) -> int | None:
        """Weight of the default priority class (None: no class is the default)."""
        return next((pc.weight for pc in self.cluster.priority_classes if pc.default), None)

    def priority_of(self, class_name: str | None) -> int:
        """Weight of a priority class; no class means the default class (or 0)."""
        classes = self.cluster.priority_classes
        if class_name is None:
            return self.default_priority() or 0
        for pc in classes:
            if pc.name == class_name:
                return pc.weight
        known = ", ".join(pc.name for pc in classes) or "none defined"
        raise KeyError(f"unknown priority class {class_name!r} (known: {known})")

    def team_for(self, queue: str) -> str:
        """The team a workload naming ``queue`` belongs to: a team name, one of its local
        queues as ``namespace/name``, or a local queue's ``name`` when only one team has a
        queue of that name (as a Kueue workload reaches its ClusterQueue through its
        LocalQueue). Raises KeyError naming what is known."""
        if any(t.name == queue for t in self.teams):
            return queue
        if "/" in queue:
            owners = [t.name for t in self.teams if queue in t.local_queues]
        else:
            owners = [
                t.name for t in self.teams if any(q.split("/")[-1] == queue for q in t.local_queues)
            ]
        owners = sorted(set(owners))
        if len(owners) == 1:
            return owners[0]
        if owners:
            raise KeyError(
                f"queue {queue!r} is ambiguous: local queues of that name belong to "
                f"{', '.join(owners)}; give it as namespace/name"
            )
        teams = ", ".join(t.name for t in self.teams) or "none"
        queues = ", ".join(q for t in self.teams for q in t.local_queues) or "none"
        raise KeyError(f"unknown team or queue {queue!r} (teams: {teams}; queues: {queues})")

    def local_queue_of(self, queue: str) -> str | None:
        """The local queue (``namespace/name``) a workload naming ``queue`` comes through,
        or None when it names a team (see :meth:`team_for`, which rejects unknown names)."""
        if any(t.name == queue for t in self.teams):
            return None
        if "/" in queue:
            return queue if any(queue in t.local_queues for t in self.teams) else None
        found = [q for t in self.teams for q in t.local_queues if q.split("/")[-1] == queue]
        return found[0] if len(found) == 1 else None

    def team(self, name: str) -> Team:
        """The team called ``name``."""
        for t in self.teams:
            if t.name == name:
                return t
        raise KeyError(f"unknown team {name!r}")


def _shown(name: Any) -> bool:
    """Whether a name may go into a field path (one that is no name, a line break say, is
    not: the path is part of a one-line error)."""
    try:
        return isinstance(name, str) and bool(check_name(name))
    except ValueError:
        return False


def _path(loc: tuple[int | str, ...], data: Any) -> str:
    """``teams[0](a).quota[1].count`` — a location people can find in their file."""
    out, node = "", data
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            node = node[part] if isinstance(node, list) and part < len(node) else None
            if isinstance(node, dict) and _shown(node.get("name")):
                out += f"({node['name']})"
        else:
            out += f".{part}" if out else str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out or "(top level)"


def validation_problems(exc: ValidationError, data: Any) -> list[tuple[str, str]]:
    """Turn a pydantic error into ``(field path, reason)`` pairs."""
    problems = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        reason = err["msg"].removeprefix("Value error, ")
        problems.append((_path(loc, data), reason))
    return problems


def load_policy(data: Any, source: str = "policy") -> Policy:
    """Validate a policy document, raising :class:`PolicyError` with field paths and reasons."""
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(validation_problems(exc, data), source) from None
