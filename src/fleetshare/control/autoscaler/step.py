"""What a step looks at (:class:`Moment`), what it hands the runner (:class:`Step`) and why a
node is removed (:func:`removal`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetshare.governance.snapshot import Running
from fleetshare.model.node import Node
from fleetshare.model.reason import Reason
from fleetshare.model.workload import Workload


def removal(category: str, message: str = "") -> Reason:
    """Why a node is removed: ``category`` (``empty``, ``repair``, ``consolidation``,
    ``expire``, ``drift``, ``spot-interruption``, ``ceiling``, ...) and the words shown."""
    return Reason(category, message or category)


@dataclass(frozen=True, slots=True)
class Moment:
    """What a step looks at besides its own nodes: the time, the running and pending work."""

    now: float
    running: Mapping[str, Running]
    pending: Sequence[Workload]


@dataclass
class Step:
    """What the runner applies after a step."""

    joins: list[tuple[float, Node]] = field(default_factory=list)
    removals: list[tuple[str, Reason]] = field(default_factory=list)
    """(node, reason): remove the node and requeue its workloads."""
    wake: list[float] = field(default_factory=list)
    """Call again at these times."""
    wake_if_busy: list[float] = field(default_factory=list)
    """...and at these while there is work (schedule changes, spot interruptions)."""
    log: list[dict[str, Any]] = field(default_factory=list)
    again: bool = False
    """Step again at once: nodes were removed while others waited only for the budget they
    used (removal is immediate, so the budget is free again)."""

    def removing(self) -> set[str]:
        """The nodes this step removes so far."""
        return {name for name, _ in self.removals}
