"""The bundled showcase: ``fleetshare simulate`` with no arguments.

Helios Earth is real multi-team demand (16 teams, 856 GPUs of quota). Most of May 2020 fits in
the cluster, so policies differ little there; the showcase takes the busiest stretch instead --
days 13 to 16, when the teams together ask for more than the 856 GPUs (up to 933 on day 15)
-- so that sharing rules, reclaim and fair share actually decide something: 2,697 jobs that
reproduce the 16 teams' per-minute demand exactly. ``--start-day 0 --days 31`` (or
``--trace helios``) runs the whole month.
"""

from __future__ import annotations

from typing import Any

SHOWCASE_TRACE = "helios"
SHOWCASE_OPTIONS: dict[str, Any] = {"start_day": 13, "days": 3}
SHOWCASE_POLICIES: tuple[str, ...] = (
    "static",
    "idle50",
    "borrow-quota",
    "fair-share",
    "no-fair-share",
    "static-autoscale",
    "fair-share-autoscale",
)
"""Every sharing rule on the fixed cluster, and static quotas vs fleetshare's default sharing
on an autoscaled cluster."""

DEFAULT_POLICIES: tuple[str, ...] = SHOWCASE_POLICIES
"""What runs when ``--policy`` is not given (for any input)."""


def showcase_options(days: float | None = None, start_day: float | None = None) -> dict[str, Any]:
    """The showcase's trace options, with ``days`` / ``start_day`` replaced where given."""
    options = dict(SHOWCASE_OPTIONS)
    if days is not None:
        options["days"] = days
    if start_day is not None:
        options["start_day"] = start_day
    return options
