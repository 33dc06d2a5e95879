"""The disruption package's input and output types (plain, frozen where possible)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, cast

from fleetshare.autoscaling.cloud import CapacityType
from fleetshare.autoscaling.provisioner import CAPACITY_TYPE_LABEL, POOL_LABEL, Launch
from fleetshare.model.node import (
    INSTANCE_TYPE_LABEL,
    ZONE_LABEL,
    NodeSelectorRequirement,
    Taint,
    Toleration,
)
from fleetshare.model.reason import Reason

ActionKind = Literal["delete-empty", "delete", "replace", "expire", "drift", "repair"]
PodKind = Literal["training", "inference", "batch"]

DO_NOT_DISRUPT_ANNOTATION = "karpenter.sh/do-not-disrupt"


def money(value: float) -> str:
    """``$1.006/h``."""
    return f"${value:.3f}/h"


def plural(count: int, word: str) -> str:
    """``1 pod``, ``2 pods``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


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
    """When a pod last bound to or left the node (None: derived, see the package docstring)."""
    nominated_until: float | None = None
    """Pending work counts on this node's room until then (it was launched for that work, or
    the provisioner found room here): voluntary disruption leaves it alone meanwhile, as
    Karpenter leaves nominated nodes alone."""

    @property
    def usable(self) -> bool:
        """Ready and healthy."""
        return self.ready and self.healthy

    @property
    def unhealthy(self) -> bool:
        """Not usable, with a known time it went so (what repair acts on)."""
        return not self.usable and self.unhealthy_since is not None

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
        return f"{self.name} ({self.instance_type}, {money(self.price_per_hour)})"


@dataclass(frozen=True, slots=True)
class PodView:
    """A running pod. ``requests`` is in milli-units; ``gang`` names its gang (see package doc);
    ``labels`` are its workload's labels (PDB selectors and ``karpenter.sh/do-not-disrupt``)."""

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
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    podset: str = ""
    """The pod set the pod belongs to (within its workload)."""
    domain: str | None = None
    """A topology level the pod set's pods share (required, or preferred when
    ``domain_required`` is False; :mod:`fleetshare.placement.topology`)."""
    domain_required: bool = True

    @property
    def unit(self) -> str:
        """What is requeued when the pod is evicted: its gang, else its workload."""
        return self.gang or self.workload


@dataclass(frozen=True, slots=True)
class Pdb:
    """A PodDisruptionBudget: ``max_unavailable`` and/or ``min_available`` pods, with
    ``disrupted`` of its pods currently unavailable (evicted, pending or not ready).

    It covers the pods naming it (``PodView.pdb``), the pods of ``workloads`` and the pods whose
    labels include every pair of ``selector`` (an empty selector selects nothing)."""

    name: str
    max_unavailable: int | None = None
    min_available: int | None = None
    disrupted: int = 0
    workloads: frozenset[str] = frozenset()
    selector: Mapping[str, str] = field(default_factory=dict, hash=False)

    def covers(self, pod: PodView) -> bool:
        """True when ``pod`` counts against this budget."""
        if pod.pdb == self.name or pod.workload in self.workloads:
            return True
        return bool(self.selector) and all(pod.labels.get(k) == v for k, v in self.selector.items())

    def allowed(self, running: int) -> int | None:
        """More evictions allowed now, given ``running`` pods it covers (None: unlimited)."""
        options = []
        if self.max_unavailable is not None:
            options.append(self.max_unavailable - self.disrupted)
        if self.min_available is not None:
            options.append(running - self.min_available)
        return max(0, min(options)) if options else None


@dataclass(frozen=True, slots=True)
class DoNotDisrupt:
    """``karpenter.sh/do-not-disrupt`` from configuration, on top of the views' own flags:
    every node of ``pools``, the ``nodes`` named, and the pods of ``workloads``."""

    pools: frozenset[str] = frozenset()
    nodes: frozenset[str] = frozenset()
    workloads: frozenset[str] = frozenset()

    def node(self, node: NodeView) -> bool:
        """True when ``node`` carries the annotation."""
        return node.do_not_disrupt or node.name in self.nodes or node.pool in self.pools

    def pod(self, pod: PodView) -> bool:
        """True when ``pod`` carries the annotation (flag, workload label, or listed)."""
        return (
            pod.do_not_disrupt
            or pod.labels.get(DO_NOT_DISRUPT_ANNOTATION) == "true"
            or pod.workload in self.workloads
        )


@dataclass(frozen=True, slots=True)
class DisruptionSettings:
    """Tunables (see the package docstring for what each one means)."""

    training_saving_threshold: float = 0.3
    min_saving_fraction: float = 0.05
    min_saving_per_hour: float = 0.01
    max_multi_node_candidates: int = 100
    max_replacement_candidates: int = 10
    plan_time_limit: float = 30.0
    expiry_grace_seconds: float = 0.0
    drift_waits_for_training: bool = True
    repair_grace_seconds: float = 60.0
    max_unhealthy_fraction: float = 0.2


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

    @classmethod
    def same_shape(cls, node: NodeView, price: float | None = None) -> Replacement:
        """One node like ``node`` (at ``price``, default its own)."""
        return cls(
            node.pool,
            node.instance_type,
            node.zone,
            cast(CapacityType, node.capacity_type),
            1,
            node.price_per_hour if price is None else price,
        )

    @property
    def hourly_cost(self) -> float:
        return self.price_per_hour * self.count

    def describe(self) -> str:
        """``2× g5.xlarge in us-east-1a (on-demand, $1.006/h each)``."""
        return (
            f"{self.count}× {self.instance_type} in {self.zone} "
            f"({self.capacity_type}, {money(self.price_per_hour)} each)"
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
    """Actions to take, and for every considered node that is kept, why (``reasons``).

    ``blocked`` is the same as text (``"category: message"``), for callers that predate
    :class:`~fleetshare.model.reason.Reason`; new code reads ``reasons``/``why_not``.
    """

    actions: list[Action] = field(default_factory=list)
    reasons: dict[str, Reason] = field(default_factory=dict)

    @property
    def blocked(self) -> dict[str, str]:
        """Node -> the reason's message."""
        return {node: str(reason) for node, reason in self.reasons.items()}

    def why_not(self, node: str) -> Reason | None:
        """Why ``node`` was kept, or None (acted on, or not considered)."""
        return self.reasons.get(node)

    def keep(self, reasons: Mapping[str, Reason]) -> None:
        """Add ``reasons`` for nodes without one; ``not-evaluated`` ones may be replaced."""
        for node, reason in reasons.items():
            old = self.reasons.get(node)
            if old is None or old.category == "not-evaluated":
                self.reasons[node] = reason


@dataclass(frozen=True, slots=True)
class Validation:
    """Whether an earlier action may still be carried out, and why (not)."""

    valid: bool
    cause: Reason

    @property
    def reason(self) -> str:
        """The cause's message."""
        return str(self.cause)
