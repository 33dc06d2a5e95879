"""What a plan returns: the planned nodes with their pods, launches, cost, bound, reasons."""

from __future__ import annotations

from dataclasses import dataclass, field

from fleetshare.model.reason import Keyed


@dataclass(frozen=True, slots=True)
class Launch:
    """Launch ``count`` nodes of one offering for a pool."""

    pool: str
    instance_type: str
    zone: str
    capacity_type: str
    count: int
    price_per_hour: float


@dataclass(frozen=True, slots=True)
class PlannedNode:
    """One planned node and the pods meant for it: (shape index, pod count) pairs."""

    pool: str
    instance_type: str
    zone: str
    capacity_type: str
    price_per_hour: float
    pods: tuple[tuple[int, int], ...]
    reservation: str | None = None


@dataclass
class Plan:
    """What to launch, what it costs, how good it is, and which pods cannot be helped."""

    launches: list[Launch] = field(default_factory=list)
    hourly_cost: float = 0.0
    lower_bound: float = 0.0
    """No plan for these pods costs less: the best of the resource prices' bound, the fluid
    LP's dual bound (when every pod is planned) and column generation's (Farley) bound."""
    bound_is_proven: bool = False
    method: str = "none"
    """Which plan won: ``greedy``, ``lp-rounding`` or ``milp`` (``none``: nothing to plan);
    followed by ``(cut short by the time limit)`` when the safety net fired."""
    unplaceable: dict[int, Keyed] = field(default_factory=dict)
    """Shape index -> why (some of) its pods are not planned (keyed where composed:
    ``provisioner/reasons.py``)."""
    seconds: float = 0.0
    nodes: list[PlannedNode] = field(default_factory=list)
    """Every planned node with its pods (``launches`` aggregates these)."""
    stats: dict[str, float] = field(default_factory=dict)
    """Solver figures: classes, candidates, columns, rounds, lp_value, ..."""
    time_limit_hit: bool = False
    """The outer time limit fired and cut the search short: the plan is valid but may be
    dearer than the budget would have found, and may differ from run to run."""

    @property
    def gap(self) -> float:
        """Relative gap to the lower bound (0 when both are 0)."""
        if self.lower_bound <= 0:
            return 0.0
        return (self.hourly_cost - self.lower_bound) / self.lower_bound
