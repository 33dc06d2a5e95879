"""The backend the control loop observes and acts through.

A :class:`Cluster` is where nodes and workloads live: the simulator's virtual world (see
:mod:`fleetshare.scenario.runner`), a service's database, or the Kubernetes API. The loop reads
it (nodes with their conditions and taints, running workloads and their bindings, pending
workloads) and acts on it (bind, evict with a reason, nodes joining and leaving); launching
and terminating instances go through a :class:`~fleetshare.autoscaling.cloud.CloudProvider`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from fleetshare.control.changes import AutoscalerNote
from fleetshare.governance.snapshot import Admission, CycleResult, Running
from fleetshare.model.namespace import NamespaceLabels
from fleetshare.model.node import Node
from fleetshare.model.reason import Reason
from fleetshare.model.workload import Workload


class RemovalRefused(Exception):
    """Raised by :meth:`Cluster.remove_node` when the node cannot go now (the API server
    refuses to evict a pod: a PodDisruptionBudget). The node stays, with its work; the
    autoscaler looks at it again later."""


class Cluster(Protocol):
    """What the control loop needs from a backend."""

    # -- observe -------------------------------------------------------------------------------

    def node_list(self) -> Sequence[Node]:
        """The nodes, with their conditions (Ready, cordoned, healthy) and taints."""
        ...

    def running_workloads(self) -> Mapping[str, Running]:
        """Admitted workloads by name, with their placement on nodes."""
        ...

    def pending_workloads(self) -> Sequence[Workload]:
        """Workloads waiting for admission."""
        ...

    def pending_for_cycle(self) -> Sequence[Workload]:
        """The pending workloads for one admission cycle: called once per cycle, so a backend
        may pass a view that also tells what changed since the last cycle (see
        :class:`~fleetshare.governance.queues.PendingView`)."""
        ...

    def namespace_labels(self) -> NamespaceLabels:
        """The labels of the namespaces, by name (those with labels besides their name; the
        engine adds the name label to every namespace)."""
        ...

    def busy(self, now: float) -> bool:
        """True while work is pending or running or more is expected (timed wake-ups that
        only matter while there is work are skipped otherwise)."""
        ...

    def admitting(self) -> bool:
        """False while the backend cannot take more admissions at this moment (the
        operator's admission writes are at their bound): the loop runs no admission cycle
        then, and the backend calls it again when it can."""
        ...

    # -- act -----------------------------------------------------------------------------------

    def bind_all(self, admissions: Sequence[Admission], now: float) -> None:
        """Admit one cycle's workloads on the nodes of their assignments, in order: each is
        *assumed* at once (running in the backend's view, no longer pending) and carried out
        in the world at :meth:`settle` (a backend may write them concurrently then; its own
        state follows their order)."""
        ...

    def forget(self, workload: Workload, now: float) -> None:
        """Undo an admission of this instant, not carried out yet, that a later cycle of the
        instant preempts (Kueue's cache "forget"): the workload waits again, as it did before
        (its reason unchanged), and nothing is started only to be stopped."""
        ...

    def settle(self, now: float) -> None:
        """The instant is settled (no cycle changes anything more): carry out its
        admissions."""
        ...

    def evict(self, workload: Workload, by: str, reason: str, message: str, now: float) -> None:
        """Stop a running workload and queue it again (preemption, node loss, disruption)."""
        ...

    def report_pending(self, result: CycleResult, now: float) -> None:
        """Record why each pending workload waits and its queue position."""
        ...

    def note_pending(self, workload: str, note: AutoscalerNote) -> None:
        """Add what the autoscaler does about a pending workload to its reason (in the
        backend's words: :meth:`AutoscalerNote.message`)."""
        ...

    def join_node(self, node: Node, at: float) -> None:
        """A launched node becomes part of the cluster at ``at`` (when it is Ready)."""
        ...

    def remove_node(self, name: str, reason: Reason, now: float) -> bool:
        """The node leaves the cluster; its workloads are evicted for ``reason`` (its category
        is the eviction's reason, its message the details). True when some workload was
        evicted. May raise :class:`RemovalRefused` (nothing was evicted then)."""
        ...

    def wake(self, at: float, now: float, *, unless_sooner: bool = False) -> None:
        """Call the loop again at ``at`` (a guard or timer expires then); with
        ``unless_sooner``, not when the loop runs anyway before then."""
        ...

    def warn(self, now: float, message: str) -> None:
        """A warning for the run's report."""
        ...

    def log(self, now: float, event: str, **details: Any) -> None:
        """Append to the event log."""
        ...
