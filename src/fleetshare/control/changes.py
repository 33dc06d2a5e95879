"""What the control loop changed, as data: a closed set of typed changes, and the
autoscaler's note on a pending workload.

A backend records each change it carries out (:data:`Change`) and its sink turns it into its
own words: the service's SQL rows and events (:mod:`fleetshare.service.plane`), the
simulator's records and JSON, the operator's Kubernetes patches. Times are numbers (the
loop's seconds), never formatted into a message; no sink parses a message back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fleetshare.governance.snapshot import Assignment, Running
from fleetshare.model.reason import Gist, Keyed, PendingReason, Reason
from fleetshare.model.resources import Resources
from fleetshare.model.workload import Workload


@dataclass(frozen=True, slots=True)
class Admitted:
    """A workload was admitted and bound to the nodes of ``assignment``, borrowing
    ``borrowed`` beyond its team's quota."""

    at: float
    workload: Workload
    assignment: Assignment
    borrowed: Resources


@dataclass(frozen=True, slots=True)
class Preempted:
    """A running workload was stopped and queued again, by workload or node ``by`` (of team
    ``by_team`` when a workload), for ``reason`` (a category) with ``message``."""

    at: float
    workload: str
    team: str
    by: str
    by_team: str | None
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Finished:
    """A running workload finished."""

    at: float
    workload: str


@dataclass(frozen=True, slots=True)
class PendingReasonChanged:
    """A pending workload's reason changed in substance (not only its numbers)."""

    at: float
    workload: str
    team: str
    reason: PendingReason
    position: int


@dataclass(frozen=True, slots=True)
class NodeJoined:
    """A node joined the cluster."""

    at: float
    node: str


@dataclass(frozen=True, slots=True)
class NodeLeft:
    """A node left the cluster for ``reason``."""

    at: float
    node: str
    reason: Reason


@dataclass(frozen=True, slots=True)
class Warned:
    """A warning for the run's report."""

    at: float
    message: str


@dataclass(frozen=True, slots=True)
class AutoscalerEvent:
    """An entry of the autoscaler's log (``launch``, ``autoscaler``, ``node``): its fields
    as the log's details."""

    at: float
    event: str
    details: Mapping[str, Any] = field(default_factory=dict)


def preemptor_team(
    by: str, running: Mapping[str, Running], pending: Mapping[str, Workload]
) -> str | None:
    """The team of preemptor ``by``: its workload's, running or pending; None for a node."""
    if by in running:
        return running[by].workload.team
    return pending[by].team if by in pending else None


Change = (
    Admitted
    | Preempted
    | Finished
    | PendingReasonChanged
    | NodeJoined
    | NodeLeft
    | Warned
    | AutoscalerEvent
)
"""Every change a backend records."""


NO_REASON = Keyed("", ("none",))
"""The reason of a note that gives none (``launching``)."""


@dataclass(frozen=True, slots=True)
class AutoscalerNote:
    """What the autoscaler does about a pending workload: ``launching`` nodes for it
    (``nodes``, the first few of ``count``, all Ready at ``ready_at``),
    ``cannot-add`` nodes for it, or launches none because ``quota-blocked``; ``reason`` says
    why for the last two (keyed where the provisioner or the demand count composed it).
    Typed already: its :attr:`gist` is made of its fields, and each sink writes the time in
    its own words (:meth:`message`)."""

    kind: Literal["launching", "cannot-add", "quota-blocked"]
    nodes: tuple[str, ...] = ()
    count: int = 0
    ready_at: float = 0.0
    reason: Keyed = NO_REASON

    @property
    def gist(self) -> Gist:
        """What the note says without its amounts (the count and the time, the numbers its
        reason quotes): its kind and the nodes it names, or its kind and its reason's key."""
        if self.kind == "launching":
            return (self.kind, self.nodes)
        return (self.kind, self.reason.gist)

    def message(self, when: Callable[[float], str]) -> str:
        """The note in words, a sink's ``when`` writing the time (``t=91``, a timestamp)."""
        if self.kind == "launching":
            names = ", ".join(self.nodes)
            if self.count > len(self.nodes):
                names += f" and {self.count - len(self.nodes):,} more"
            return f"nodes launching for it: {names} (ready at {when(self.ready_at)})"
        if self.kind == "cannot-add":
            return f"the autoscaler cannot add nodes for it: {self.reason}"
        return f"no node is launched for it, quota would not admit it: {self.reason}"


def loop_time(at: float) -> str:
    """A time as the simulator and the service write it: ``t=91``."""
    return f"t={at:g}"
