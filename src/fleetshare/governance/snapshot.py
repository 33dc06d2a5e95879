"""What the engine reads (a snapshot) and what it decides (admissions, preemptions, reasons)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from fleetshare.model.namespace import NamespaceLabels
from fleetshare.model.node import Node
from fleetshare.model.reason import PendingReason, Reason
from fleetshare.model.resources import Resources
from fleetshare.model.workload import Workload

PreemptionReason = Literal[
    "reclaim", "priority", "fair-share", "reclaim-while-borrowing", "stopped"
]
"""Why admitted work is evicted; ``stopped``: a HoldAndDrain stop policy drains it."""

PodPlacement = tuple[tuple[str, int], ...]
"""(node name, pod count) pairs for one pod set."""


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where an admitted workload runs: a flavor and a node placement per pod set."""

    flavors: tuple[str, ...]
    placement: tuple[PodPlacement, ...]
    gpus: tuple[tuple[tuple[int, ...], ...], ...] = ()
    """Per pod set, per placement pair, the GPU index of each pod's GPU share (empty when no
    pod set asks for a share, or when the backend does not know them)."""
    counts: tuple[int, ...] = ()
    """Per pod set, the pods admitted, when partial admission admitted fewer than asked (the
    operator sets a Job's parallelism to it); empty: every pod."""

    @property
    def nodes(self) -> set[str]:
        """The nodes its pods run on."""
        return {n for ps in self.placement for n, _ in ps}


@dataclass(frozen=True, slots=True)
class Running:
    """An admitted workload."""

    workload: Workload
    assignment: Assignment
    admitted_at: float

    def admitted(self) -> Workload:
        """The workload as admitted: with the assignment's pod counts (partial admission)."""
        counts = self.assignment.counts
        return self.workload.with_counts(counts) if counts else self.workload


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one admission cycle looks at."""

    now: float
    nodes: Sequence[Node]
    running: Sequence[Running]
    pending: Sequence[Workload]
    preempted_by: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Per workload preempted since something last changed (a submission, a finish, a node
    or policy change), the workloads that preempted it: it may not preempt them in turn until
    the next change, so no pair goes admit -> preempt -> admit while the world stands still."""
    preempted_since_change: frozenset[str] = frozenset()
    """Workloads preempted since something last changed: admitted again, they are no victims
    until the next change, so no workload is preempted twice while the world stands still and
    preemption always ends (at most one per workload between two changes). The control loop
    keeps both."""
    queue_usage: Mapping[str, float] = field(default_factory=dict)
    """Admission fair sharing: each local queue's usage score (``fair_admission``; absent
    means 0). The control loop keeps the usage."""
    namespaces: NamespaceLabels = field(default_factory=dict)
    """The labels of the cluster's namespaces, by name, which namespace selectors match (a
    namespace not given has only its name label: ``model.namespace.labels_of``)."""


@dataclass(frozen=True, slots=True)
class Admission:
    """Admit ``workload`` with ``assignment``; ``borrowed`` is what it takes beyond quota."""

    workload: Workload
    assignment: Assignment
    borrowed: Resources


@dataclass(frozen=True, slots=True)
class Preemption:
    """Evict ``workload`` so that ``by`` can run."""

    workload: Workload
    by: str
    reason: PreemptionReason
    message: str


@dataclass(frozen=True, slots=True)
class Pending:
    """Why a workload still waits, and where it stands in its team's queue (1 = next)."""

    workload: Workload
    reason: PendingReason
    position: int


@dataclass(slots=True)
class CycleResult:
    """The decisions of one admission cycle, in the order they were taken."""

    admissions: list[Admission] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    pending: Mapping[str, Pending] = field(default_factory=dict)
    """Every workload not admitted, with its reason and queue position, in the order the
    cycle considered them (a lazily built mapping when the cycle ran with a cache)."""
    warnings: list[Reason] = field(default_factory=list)
    wake_at: float | None = None
    """When a time-based guard (minimum runtime, reclaim grace, starvation guard) next expires:
    a cycle then may decide differently even if nothing else changes."""
    pending_changed: list[str] | None = None
    """With a cache: the pending workloads whose reason differs from the one the previous
    cycle with that cache gave them (or that were not pending then), in ``pending``'s order.
    None without a cache."""
