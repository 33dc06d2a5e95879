"""Forecast pre-provisioning: the interface a forecaster meets, and the two a service may
choose (``forecast: {model: ...}``): :class:`TrendForecaster`, the recent exponential trend
(a viral ramp or a flash crowd gives no warning a seasonal model could learn), and
:class:`SeasonalForecaster`, the autoscaler's Holt-Winters forecaster
(:mod:`fleetshare.autoscaling.forecast`, one model for both) on the traffic's history, for
daily patterns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol


class Forecaster(Protocol):
    """Predicts a request rate ``lead`` seconds after ``now`` from observed samples."""

    def predict(self, history: Sequence[tuple[float, float]], now: float, lead: float) -> float:
        """The rate expected at ``now + lead`` (``history``: ``(time, rps)``, oldest first,
        none after ``now``)."""
        ...


class TrendForecaster:
    """Exponential trend: a least-squares line through the logarithm of the samples of the
    last ``window`` seconds, extended to ``now + lead``. The prediction counts only when the
    trend rises by more than ``min_rise`` (a fraction) over the lead -- noise must not move
    capacity -- and never below the latest sample (a falling trend removes nothing ahead of
    time: the scaler's scale-down rules do that)."""

    def __init__(self, window: float, min_rise: float = 0.25) -> None:
        self.window = window
        self.min_rise = min_rise

    def predict(self, history: Sequence[tuple[float, float]], now: float, lead: float) -> float:
        recent = [(t, math.log(v)) for t, v in history if t > now - self.window and v > 0]
        if not history:
            return 0.0
        last = history[-1][1]
        if len(recent) < 3:
            return last
        n = len(recent)
        mean_t = sum(t for t, _ in recent) / n
        mean_v = sum(v for _, v in recent) / n
        spread = sum((t - mean_t) ** 2 for t, _ in recent)
        slope = sum((t - mean_t) * (v - mean_v) for t, v in recent) / spread
        if math.exp(slope * lead) <= 1 + self.min_rise:
            return last
        return max(last, math.exp(mean_v + slope * (now + lead - mean_t)))


class SeasonalForecaster:
    """The autoscaler's seasonal forecast (:func:`fleetshare.autoscaling.forecast.
    forecast_demand`: Holt-Winters with a daily season, sampled as peaks per ``step_seconds``)
    of the request rate, its point forecast plus error band over the lead; never below the
    latest sample (a falling forecast removes nothing ahead of time)."""

    def __init__(self, step_seconds: float = 300.0) -> None:
        from fleetshare.autoscaling.forecast import ForecastSpec

        self.spec = ForecastSpec(step_seconds=step_seconds)

    def predict(self, history: Sequence[tuple[float, float]], now: float, lead: float) -> float:
        from fleetshare.autoscaling.forecast import forecast_demand

        if not history:
            return 0.0
        times = [t for t, _ in history]
        rates = [v for _, v in history]
        ahead = forecast_demand(times, rates, now, max(lead, 1.0), self.spec)
        return max(rates[-1], ahead.upper)
