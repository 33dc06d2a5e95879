"""Warm capacity: room a node pool keeps ahead of its forecast demand (pure).

A pool with ``warm_capacity`` keeps, beyond the work it runs and the work waiting for it,
room for the demand it expects. Its *demand* at a moment is the ``resource`` requested by the
pods on its nodes plus by the pending pods that quota would admit and that it would launch
for. The *target* is the largest of

- the forecast demand over ``horizon_seconds`` (:mod:`fleetshare.autoscaling.forecast`: peak
  point forecast plus the quantile band; by default the horizon is the cloud's launch
  latency, rounded up to whole forecast steps: the room only has to carry demand until a
  launch made now is ready),
- the peak demand of the last ``hold_seconds``,
- with ``burst_seconds``: that peak plus the largest *rise* of demand seen in the last
  ``burst_seconds``, a rise being how far demand climbed within one launch latency (the time
  a launched node takes to be ready: the rise a warm room must absorb before launches catch
  up). Bursts come in runs: after demand jumped by ``r``, room for another jump of ``r`` is
  kept for ``burst_seconds``,

raised by ``margin``; the *warm room* is the target less the demand, kept as free room for
pods of ``pod`` requests (by default one unit of the resource), which the autoscaler launches
for and does not consolidate away.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import Literal

from pydantic import ConfigDict, Field, field_validator

from fleetshare.autoscaling.forecast import DAY, ForecastSpec
from fleetshare.inputs import StrictModel
from fleetshare.model.quantity import MILLI, check_quantities
from fleetshare.model.resources import GPU, parse_resources

Quantity = str | int | float


class WarmCapacity(StrictModel):
    """A node pool's warm capacity setting (see the module docstring)."""

    model_config = ConfigDict(frozen=True)

    forecast: Literal["holt-winters"] = "holt-winters"
    horizon_seconds: float | None = Field(
        default=None, gt=0, description="look this far ahead (default: the launch latency)"
    )
    quantile: float = Field(
        default=0.99, gt=0, lt=1, description="band above the forecast: quantile of its errors"
    )
    margin: float = Field(default=0.0, ge=0, le=1, description="target raised by this fraction")
    hold_seconds: float = Field(
        default=0.0, ge=0, description="keep at least the peak demand of this recent span"
    )
    burst_seconds: float = Field(
        default=0.0,
        ge=0,
        description="keep room for another rise as large as the largest of this recent span",
    )
    resource: str = Field(default=GPU, min_length=1)
    pod: dict[str, Quantity] = Field(
        default_factory=dict, description="the unit of warm room (default: 1 of the resource)"
    )
    step_seconds: float = Field(default=600.0, ge=1, description="forecast sampling step")
    season_seconds: float = Field(default=DAY, gt=0)
    history_seconds: float = Field(default=7 * DAY, gt=0)
    refit_every_samples: int = Field(default=72, ge=1)
    history: list[tuple[float, float]] = Field(
        default_factory=list,
        description="demand known before the run: (time, value) change points, times <= 0",
    )

    @field_validator("pod")
    @classmethod
    def _pod(cls, value: dict[str, Quantity]) -> dict[str, Quantity]:
        check_quantities(value)
        return value

    @field_validator("history")
    @classmethod
    def _history(cls, value: list[tuple[float, float]]) -> list[tuple[float, float]]:
        times = [t for t, _ in value]
        if any(b < a for a, b in pairwise(times)):
            raise ValueError("times must not decrease")
        if times and times[-1] > 0:
            raise ValueError(f"times must be <= 0 (before the run), got {times[-1]}")
        if any(v < 0 for _, v in value):
            raise ValueError("demand must not be negative")
        return value

    def spec(self) -> ForecastSpec:
        """The forecaster's settings."""
        return ForecastSpec(
            method=self.forecast,
            step_seconds=self.step_seconds,
            season_seconds=self.season_seconds,
            history_seconds=self.history_seconds,
            refit_every_samples=self.refit_every_samples,
            quantile=self.quantile,
        )

    def horizon(self, latency: float) -> float:
        """How far ahead to forecast: ``horizon_seconds``, else the launch ``latency`` (one
        forecast step when launches are instant)."""
        if self.horizon_seconds is not None:
            return self.horizon_seconds
        return latency if latency > 0 else self.step_seconds

    def unit(self) -> dict[str, int]:
        """Requests of one warm pod (milli-units); its ``resource`` amount is positive."""
        requests = parse_resources(self.pod) if self.pod else {self.resource: MILLI}
        if requests.get(self.resource, 0) <= 0:
            raise ValueError(f"pod: must request some {self.resource}")
        return requests


def warm_target(
    forecast: float, recent: Iterable[float], margin: float, rise: float = 0.0
) -> float:
    """The demand to be ready for: the larger of the forecast and the recent peak plus
    ``rise`` (the recent burst, >= 0), raised by ``margin`` (a fraction)."""
    return max(forecast, max(recent, default=0.0) + max(rise, 0.0), 0.0) * (1 + margin)


def since(changes: Iterable[tuple[float, float]], start: float) -> list[tuple[float, float]]:
    """The change points of a step function from ``start`` on, led by the one in force at
    ``start``."""
    out: list[tuple[float, float]] = []
    for at, value in changes:
        if at <= start:
            out = [(at, value)]
        else:
            out.append((at, value))
    return out


def rise(changes: Sequence[tuple[float, float]], at: float, value: float, within: float) -> float:
    """How far demand climbs when it becomes ``value`` at ``at``: ``value`` less the lowest
    demand in force during the ``within`` seconds before (``changes``: the earlier (time,
    value) change points, increasing; the last one before that span is in force at its
    start). 0 when it does not climb or there is no earlier demand."""
    start = at - within
    lowest = math.inf
    for t, v in reversed(changes):
        lowest = min(lowest, v)
        if t <= start:
            break
    return max(0.0, value - lowest) if lowest < math.inf else 0.0


def warm_pods(target: float, demand: float, unit: float) -> int:
    """Warm pods of ``unit`` to keep so that ``demand`` plus their room reaches ``target``
    (units of the resource; a part of a pod counts whole)."""
    if unit <= 0:
        raise ValueError(f"unit must be positive, got {unit}")
    return max(0, math.ceil((target - demand) / unit - 1e-9))
