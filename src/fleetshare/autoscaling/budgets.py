"""Disruption budgets: how many of a pool's nodes may be disrupted at once (pure functions).

Semantics (Karpenter v1):

- A pool's ``disruption.budgets`` is a list; every budget that is *active* at ``now`` applies and
  the most restrictive one wins. A budget without ``schedule`` is always active. A budget with a
  cron ``schedule`` (5 fields or ``@daily``-style, evaluated in UTC) is active from each time the
  schedule fires for ``duration_seconds``. A schedule without a duration is treated as always
  active (Karpenter rejects that combination; here the more restrictive reading wins).
- ``nodes`` is a count (``"0"``, ``3``) or a percentage of the pool's nodes (``"10%"``), rounded
  *up* like Karpenter (10% of 5 nodes allows 1).
- The allowance is that limit minus the pool's nodes already being disrupted (nodes the
  controller is deleting or replacing, and nodes that are not Ready/healthy), never below 0.
- No active budget (an empty list, or only scheduled budgets outside their windows): unlimited.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from croniter import croniter

from fleetshare.autoscaling.nodepool import Budget


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """How many more of a pool's nodes may be disrupted now (``None``: unlimited), and why."""

    allowed: int | None
    description: str


def budget_limit(budget: Budget, total_nodes: int) -> int:
    """The number of nodes ``budget`` allows disrupted at once in a pool of ``total_nodes``.

    Raises ``ValueError`` for a malformed ``nodes`` value.
    """
    value = budget.nodes
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"budget nodes must not be negative: {value}")
        return value
    text = value.strip()
    try:
        if text.endswith("%"):
            percent = float(text[:-1])
            if not 0 <= percent <= 100:
                raise ValueError
            return math.ceil(total_nodes * percent / 100 - 1e-9)
        count = int(text)
        if count < 0:
            raise ValueError
        return count
    except ValueError:
        raise ValueError(
            f"budget nodes must be a count or a percentage like '10%', got {value!r}"
        ) from None


def last_window_start(schedule: str, now: float) -> float:
    """When ``schedule`` (cron, UTC) last fired at or before ``now`` (epoch seconds)."""
    if not croniter.is_valid(schedule):
        raise ValueError(f"invalid cron schedule {schedule!r}")
    # get_prev is strictly before its base; cron fires on whole minutes, so basing on the next
    # whole second includes a firing exactly at ``now``.
    base = datetime.fromtimestamp(math.floor(now) + 1, tz=UTC)
    return croniter(schedule, base).get_prev(datetime).timestamp()


def window_open(schedule: str, duration_seconds: float | None, now: float) -> bool:
    """True while the window opened by the latest firing of ``schedule`` is still open."""
    if duration_seconds is None:
        return True
    return now < last_window_start(schedule, now) + duration_seconds


def budget_active(budget: Budget, now: float) -> bool:
    """True when ``budget`` applies at ``now``."""
    if budget.schedule is None:
        return True
    return window_open(budget.schedule, budget.duration_seconds, now)


def _describe(budget: Budget) -> str:
    text = f"budget nodes={budget.nodes!s}"
    if budget.schedule is not None:
        hours = (budget.duration_seconds or 0) / 3600
        text += f" (window '{budget.schedule}' UTC for {hours:g}h)"
    return text


def budget_status(
    budgets: Sequence[Budget], total_nodes: int, disrupting: int, now: float
) -> BudgetStatus:
    """How many more nodes of a pool with ``total_nodes`` nodes (``disrupting`` of them already
    being disrupted or not Ready) the active budgets allow now."""
    active = [b for b in budgets if budget_active(b, now)]
    if not active:
        return BudgetStatus(None, "no disruption budget is active")
    tightest = min(active, key=lambda b: budget_limit(b, total_nodes))
    limit = budget_limit(tightest, total_nodes)
    allowed = max(0, limit - disrupting)
    return BudgetStatus(
        allowed,
        f"{_describe(tightest)} allows {limit} of {total_nodes} node(s) disrupted at once; "
        f"{disrupting} already disrupting or not ready, so {allowed} more",
    )
