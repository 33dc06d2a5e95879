"""The stream of typed decisions a control loop makes, whatever backend it runs over.

Every backend (the simulator's :class:`~fleetshare.scenario.runner.Runner`, the service's
:class:`~fleetshare.service.backend.EmbeddedCluster`, the operator's
:class:`~fleetshare.operator.cluster.KubeCluster`) is driven by the same
:class:`~fleetshare.control.loop.ControlLoop` through the
:class:`~fleetshare.control.cluster.Cluster` protocol. A :class:`Recorder` stands in front of a
loop's backend: it forwards every call and keeps what the loop told the backend to do as the
typed changes of :mod:`fleetshare.control.changes` (``Admitted``, ``Preempted``,
``PendingReasonChanged``), and the work the backend evicted itself because a node under it
failed (a ``Preempted`` by the node, ``node-failure``). :func:`decisions` turns them into
plain values to compare: the time, the workload, its flavors, nodes and pod counts; a
preemption's victim, preemptor and reason category; a pending reason's category (never its
message, which each sink words its own way).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from fleetshare.control.changes import (
    Admitted,
    Change,
    PendingReasonChanged,
    Preempted,
    preemptor_team,
)
from fleetshare.control.loop import ControlLoop
from fleetshare.governance.queues import new_in_substance
from fleetshare.governance.snapshot import Admission, CycleResult, Running
from fleetshare.model.reason import PendingReason, Reason
from fleetshare.model.workload import Workload

Placement = tuple[tuple[tuple[str, int], ...], ...]


@dataclass(frozen=True)
class Admit:
    """``workload`` admitted at ``at`` on ``flavors`` (per pod set), its pods on ``placement``
    (per pod set: node, pods), ``counts`` pods per pod set (a partial admission; else empty)."""

    at: float
    workload: str
    flavors: tuple[str, ...]
    placement: Placement
    counts: tuple[int, ...]


@dataclass(frozen=True)
class Preempt:
    """``workload`` stopped at ``at`` by workload or node ``by`` for ``reason`` (a category)."""

    at: float
    workload: str
    by: str
    reason: str


@dataclass(frozen=True)
class Waits:
    """``workload`` waits from ``at`` for a reason of ``category``."""

    at: float
    workload: str
    category: str


Decision = Admit | Preempt | Waits


@dataclass(frozen=True)
class Outcome:
    """Where a replay left the work: the workloads running and those waiting at its end."""

    running: frozenset[str]
    pending: frozenset[str]


NODE_FAILURE = "node-failure"
"""The category of an eviction the backend carried out itself: a node under the work failed."""


class Recorder:
    """A :class:`~fleetshare.control.cluster.Cluster` in front of a loop's backend: every call
    goes through to it; the admissions, evictions and pending reasons the loop hands it are
    kept in :attr:`changes` (a pending reason when it changed in substance, the rule the
    backends follow; an eviction by node removal as the backend carried it out). With a clock
    (``now``), also the work the backend evicted between two instants, outside the loop: when
    its node failed (see :meth:`admitting`)."""

    def __init__(self, inner: Any, now: Callable[[], float] | None = None) -> None:
        self.inner = inner
        self.changes: list[Change] = []
        self._said: dict[str, PendingReason] = {}
        self._forgotten: dict[str, PendingReason] = {}
        """The reasons said before an admission, until the instant is settled."""
        self._now = now
        self._running: dict[str, Running] = {}
        """The work running when the last instant was settled."""
        self._settled = True

    @classmethod
    def attach(cls, loop: ControlLoop, now: Callable[[], float] | None = None) -> Recorder:
        """Put a recorder in front of ``loop``'s backend (``now``: the backend's clock)."""
        recorder = cls(loop.cluster, now)
        loop.cluster = recorder  # type: ignore[assignment]  # a Cluster by forwarding
        return recorder

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def admitting(self) -> bool:
        """The first call of an instant's cycles: the work that ran when the last instant was
        settled, is no longer running and waits again was evicted by the backend itself (the
        loop evicts through :meth:`evict`): kept as preempted, in name order, by the first of
        its nodes (by name) that is gone or not ready, for :data:`NODE_FAILURE`."""
        if self._settled and self._now is not None:
            self._settled = False
            running = self.inner.running_workloads()
            waiting = {w.name for w in self.inner.pending_workloads()}
            nodes = {n.name: n for n in self.inner.node_list()}
            for name in sorted(n for n in self._running if n not in running and n in waiting):
                was = self._running[name]
                lost = [n for n in sorted(was.assignment.nodes)
                        if n not in nodes or not nodes[n].ready]  # fmt: skip
                self._preempted(was.workload, lost[0] if lost else "", NODE_FAILURE, "",
                                self._now())  # fmt: skip
        return bool(self.inner.admitting())

    def bind_all(self, admissions: Sequence[Admission], now: float) -> None:
        for admission in admissions:
            wl = admission.workload
            said = self._said.pop(wl.name, None)
            if said is not None:
                self._forgotten[wl.name] = said
            self.changes.append(Admitted(now, wl, admission.assignment, admission.borrowed))
        self.inner.bind_all(admissions, now)

    def evict(self, workload: Workload, by: str, reason: str, message: str, now: float) -> None:
        self._preempted(workload, by, reason, message, now)
        self.inner.evict(workload, by, reason, message, now)

    def forget(self, workload: Workload, now: float) -> None:
        """An admission of this instant undone: it is no decision carried out (its reason
        as said before it)."""
        name = workload.name
        at = max(i for i, c in enumerate(self.changes)
                 if isinstance(c, Admitted) and c.workload.name == name)  # fmt: skip
        del self.changes[at]
        said = self._forgotten.pop(name, None)
        if said is not None:
            self._said[name] = said
        self.inner.forget(workload, now)

    def _preempted(
        self, workload: Workload, by: str, reason: str, message: str, now: float
    ) -> None:
        pending = {w.name: w for w in self.inner.pending_workloads()}
        by_team = preemptor_team(by, self.inner.running_workloads(), pending)
        change = Preempted(now, workload.name, workload.team, by, by_team, reason, message)
        self.changes.append(change)

    def report_pending(self, result: CycleResult, now: float) -> None:
        for name, pending in result.pending.items():
            if new_in_substance(self._said.get(name), pending.reason):
                team = pending.workload.team
                change = PendingReasonChanged(now, name, team, pending.reason, pending.position)
                self.changes.append(change)
            self._said[name] = pending.reason
        self.inner.report_pending(result, now)

    def settle(self, now: float) -> None:
        self._forgotten.clear()
        self.inner.settle(now)
        self._running = dict(self.inner.running_workloads())
        self._settled = True

    def remove_node(self, name: str, reason: Reason, now: float) -> bool:
        before = dict(self.inner.running_workloads())
        evicted: bool = self.inner.remove_node(name, reason, now)
        after = self.inner.running_workloads()
        for victim, running in before.items():
            if victim not in after:
                self._preempted(running.workload, name, reason.category, reason.details, now)
        return evicted


def decisions(
    changes: Iterable[Change],
    *,
    offset: float = 0.0,
    rename: Callable[[str], str] = lambda name: name,
) -> list[Decision]:
    """The changes as plain decisions, times less ``offset`` and every workload and node name
    through ``rename``; a pending reason only when its category changed since the workload's
    last decision (a change in substance of the same category is each sink's wording)."""
    out: list[Decision] = []
    category: dict[str, str] = {}
    for change in changes:
        match change:
            case Admitted(at=at, workload=wl, assignment=assignment):
                category.pop(wl.name, None)
                placement = tuple(
                    tuple((rename(node), pods) for node, pods in podset)
                    for podset in assignment.placement
                )
                out.append(
                    Admit(at - offset, rename(wl.name), assignment.flavors, placement,
                          assignment.counts)
                )  # fmt: skip
            case Preempted(at=at, workload=name, by=by, reason=reason):
                category.pop(name, None)
                out.append(Preempt(at - offset, rename(name), rename(by), reason))
            case PendingReasonChanged(at=at, workload=name, reason=why):
                if category.get(name) != why.category:
                    category[name] = why.category
                    out.append(Waits(at - offset, rename(name), why.category))
            case _:
                pass
    return out
