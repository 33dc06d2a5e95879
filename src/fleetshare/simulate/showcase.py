"""The bundled showcase: ``fleetshare simulate`` with no arguments.

Helios Earth is real multi-team demand (16 teams, 856 GPUs of quota). Its busiest stretch,
days 13 to 16 of May 2020, still fits the whole cluster once Earth's pending work is counted
once (work used at most 821 of 856 GPUs), so on all 16 teams the sharing rules decide nothing
and come out identical. The showcase is therefore a **sub-cluster** of that window, chosen by
a rule stated before any simulation (:func:`contending_teams`): the teams whose demand
exceeded their own quota during at least 5% of the window's minutes -- the teams that needed
to borrow, and so the ones for whom the sharing rules decide anything. On days 13-16 that is
seven teams (vc6YE, vc8Sj, vcLJZ, vcMod, vcTJs, vcpDC, vcvlY) with 584 GPUs of quota: their
demand exceeds the sub-cluster's quota at times, so borrowing, reclaim, fair share and borrow
limits all decide something, and most of them also lend (vc6YE and vcvlY are below their
quota two thirds of the time).

The rule was chosen on days 13-16; ``docs/simulate.md`` reports it on held-out windows it was
not chosen on (``bench/showcase_choice.py``). ``--trace helios --start-day 13 --days 3`` runs
all 16 teams of the window; ``--option clusters=[...]`` any other sub-cluster.
"""

from __future__ import annotations

from typing import Any

import numpy as np

SHOWCASE_TRACE = "helios"
SHOWCASE_WINDOW: dict[str, float] = {"start_day": 13, "days": 3}
"""The busiest three days of Helios Earth's month (the whole cluster's demand)."""
CONTENTION_SHARE = 0.05
"""A team contends when its demand exceeded its quota during at least this share of the
window (5%: 3.6 hours of a 3-day window)."""
SHOWCASE_CLUSTERS: tuple[str, ...] = (
    "vc6YE",
    "vc8Sj",
    "vcLJZ",
    "vcMod",
    "vcTJs",
    "vcpDC",
    "vcvlY",
)
"""``contending_teams(13, 3)``, written out (a test checks the two agree)."""
SHOWCASE_OPTIONS: dict[str, Any] = {**SHOWCASE_WINDOW, "clusters": list(SHOWCASE_CLUSTERS)}
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


def over_quota_share(start_day: float, days: float) -> dict[str, float]:
    """Per Helios Earth VC: the share of the window's time during which its demand (running +
    pending GPUs, the loader's per-minute curve) exceeded its quota (the loader's: the most
    common daily value over the window)."""
    from fleetshare.traces import load_trace

    trace = load_trace(SHOWCASE_TRACE, start_day=start_day, days=days)
    quota = {
        t["name"]: float(t["quota"][0]["resources"]["nvidia.com/gpu"])
        for t in trace.policy["teams"]
    }
    out = {}
    for team, q in sorted(quota.items()):
        curve = trace.demand[team]
        widths = np.diff(np.append(curve.times, trace.duration))
        out[team] = float(widths[curve.values > q].sum() / trace.duration)
    return out


def contending_teams(start_day: float, days: float, share: float = CONTENTION_SHARE) -> list[str]:
    """The showcase's rule: the Helios Earth VCs whose demand exceeded their quota during at
    least ``share`` of the window ``[start_day, start_day + days)``, by name. It reads the
    trace's demand only, never a simulation's outcome."""
    return [team for team, s in over_quota_share(start_day, days).items() if s >= share]


def showcase_options(days: float | None = None, start_day: float | None = None) -> dict[str, Any]:
    """The showcase's trace options, with ``days`` / ``start_day`` replaced where given (the
    sub-cluster stays: ``--trace helios`` runs all teams)."""
    options = {**SHOWCASE_OPTIONS, "clusters": list(SHOWCASE_CLUSTERS)}
    if days is not None:
        options["days"] = days
    if start_day is not None:
        options["start_day"] = start_day
    return options
