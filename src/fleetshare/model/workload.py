"""Workloads: gangs of pods admitted all-or-nothing on behalf of a team."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from fleetshare.model.node import NodeSelectorRequirement, Toleration
from fleetshare.model.resources import Resources, scale, total


@dataclass(frozen=True, slots=True)
class PodSet:
    """``count`` identical pods, each requesting ``requests``."""

    name: str
    count: int
    requests: Resources
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    affinity: tuple[tuple[NodeSelectorRequirement, ...], ...] = ()
    """Required node affinity: terms ORed, each a tuple of requirements ANDed."""
    required_topology: str | None = None
    """A node label (a topology level such as ``kubernetes.io/hostname``): every pod of the set
    must run on nodes sharing its value (one domain; Kueue's ``podset-required-topology``)."""
    preferred_topology: str | None = None
    """Like ``required_topology``, but when no domain of that level holds the pod set, wider
    levels are tried and then any nodes (Kueue's ``podset-preferred-topology``)."""
    min_count: int | None = None
    """Partial admission (Kueue's pod set ``minCount``: a Job's
    ``kueue.x-k8s.io/job-min-parallelism``): when ``count`` pods do not fit, fewer may run,
    down to this many. None: all or nothing."""

    def total(self) -> Resources:
        """What all pods of the set request together."""
        return scale(self.requests, self.count)


_created = itertools.count()


@dataclass(frozen=True, slots=True)
class Workload:
    """A job: one or more pod sets admitted together (gang), queued for one team.

    ``priority`` is the resolved weight of ``priority_class``; ``duration`` (seconds) is known
    only in simulation. ``created`` is the creation order: workloads submitted at the same
    instant with the same priority are queued in it (never by name). By default it counts
    the workloads made in this process, so a loader that builds them in file or trace order
    gets that order; a backend with its own order (a database's sequence) passes it.
    """

    name: str
    team: str
    podsets: tuple[PodSet, ...]
    submit_time: float = 0.0
    priority: int = 0
    priority_class: str | None = None
    duration: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    queue: str | None = None
    """The local queue (``namespace/name``) it was submitted to, if it named one."""
    created: int = field(default_factory=lambda: next(_created), compare=False)

    @property
    def namespace(self) -> str | None:
        """The namespace it was submitted in: its local queue's (None when it named its team,
        not a local queue)."""
        queue = self.queue
        return queue.partition("/")[0] if queue is not None and "/" in queue else None

    def with_counts(self, counts: Sequence[int]) -> Workload:
        """The workload with ``counts[i]`` pods in pod set i (as partially admitted)."""
        podsets = tuple(
            ps if ps.count == n else replace(ps, count=n)
            for ps, n in zip(self.podsets, counts, strict=True)
        )
        return replace(self, podsets=podsets)

    def total_requests(self) -> Resources:
        """Everything the gang requests."""
        return total(ps.total() for ps in self.podsets)

    @property
    def pod_count(self) -> int:
        """Number of pods in the gang."""
        return sum(ps.count for ps in self.podsets)
