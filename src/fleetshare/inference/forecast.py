"""Forecast pre-provisioning: the interface a forecaster meets, and the two a service may
choose (``forecast: {model: ...}``): :class:`TrendForecaster`, a recent trend that counts only
when it is significant against the rate's own noise (a viral ramp or a flash crowd gives no
warning a seasonal model could learn), and :class:`SeasonalForecaster`, the autoscaler's
Holt-Winters forecaster (:mod:`fleetshare.autoscaling.forecast`, one model for both) on the
traffic's history, for daily patterns.

**The trend test** (:func:`trend_forecast`, pure). The scaler's observed rate ``r`` is read on
a log scale, ``x = log(max(r, floor_rps))``. The *rise* is ``x(now) - x(now - window)``. The
rate's own noise is the same statistic taken at every sample of the ``baseline_seconds``
before the window (the rise over one window ending there): its median is the usual drift,
``1.4826 x`` its median absolute deviation (a robust standard deviation, at least
``min_noise``) its noise. The *score* is ``(rise - median) / noise``. The trend counts when
the score is above ``z`` (``z_off`` while it already counts: hysteresis) and the rise itself
is above ``log(1 + min_rise)``; without a baseline of ``MIN_BASELINE`` rises it never counts.
When it counts, the forecast is the latest rate times ``exp(growth x lead)``, ``growth`` the
least-squares slope of ``x`` over the window, capped at ``max_factor`` times the latest rate
(a cap tied to what is observed: an exponential extrapolated over minutes runs away); else it
is the latest rate, which the rps trigger already reads (the forecast then adds nothing). The
forecast never goes below the latest rate: a falling trend removes nothing ahead of time.
**Hold**: a forecast made while the trend counts stands for ``hold`` seconds after (the
highest of them while they overlap; ``None``: the lead), so the capacity bought for a rise is
still wanted when it comes up and drains the queue the rise built; then the scaler's own
scale-down window follows. Nothing here reads a clock.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from fleetshare.autoscaling.forecast import Forecast


class Forecaster(Protocol):
    """Predicts a request rate ``lead`` seconds after ``now`` from observed samples."""

    def predict(self, history: Sequence[tuple[float, float]], now: float, lead: float) -> float:
        """The rate expected at ``now + lead`` (``history``: ``(time, rps)``, oldest first,
        none after ``now``)."""
        ...


MIN_BASELINE = 10
"""Rises of the baseline needed before a trend can count (its noise is unknown before)."""


@dataclass(frozen=True, slots=True)
class TrendSettings:
    """The trend test's settings (the module docstring)."""

    window: float = 120.0
    min_rise: float = 0.1
    z: float = 8.0
    z_off: float = 4.0
    baseline: float = 1800.0
    min_noise: float = 0.03
    max_factor: float = 1.75
    hold: float | None = None
    floor_rps: float = 1.0


DEFAULT_TREND = TrendSettings()
"""The defaults, chosen on bench/inference_slo.py's steady and viral traffic, seeds 1-3
(docs/inference.md, "The forecast out of sample")."""


@dataclass(frozen=True, slots=True)
class TrendState:
    """What the trend test remembers: whether the trend counted at the last answer, and the
    forecast held (``held`` until ``held_until``)."""

    counting: bool = False
    held: float = 0.0
    held_until: float = -math.inf


@dataclass(frozen=True, slots=True)
class TrendSignal:
    """One answer of the trend test: the forecast rate, whether the trend counts, its rise
    (log), score and the noise it was judged against (NaN without a baseline)."""

    rate: float
    counts: bool
    rise: float = math.nan
    score: float = math.nan
    noise: float = math.nan


def trend_forecast(
    history: Sequence[tuple[float, float]],
    now: float,
    lead: float,
    settings: TrendSettings,
    state: TrendState = TrendState(),
) -> tuple[TrendSignal, TrendState]:
    """The trend test at ``now`` and the state for the next answer (with the hold)."""
    signal = _test(history, now, lead, settings, state.counting)
    held = state.held if now < state.held_until else 0.0
    if signal.counts:
        hold = lead if settings.hold is None else settings.hold
        state = TrendState(True, max(held, signal.rate), now + hold)
    else:
        state = TrendState(False, state.held, state.held_until)
    if held > signal.rate:
        signal = TrendSignal(held, signal.counts, signal.rise, signal.score, signal.noise)
    return signal, state


def _test(
    history: Sequence[tuple[float, float]],
    now: float,
    lead: float,
    settings: TrendSettings,
    counting: bool,
) -> TrendSignal:
    s = settings
    if not history:
        return TrendSignal(0.0, False)
    # only the baseline, the window and the window before the baseline's first sample count
    first = bisect.bisect_right(history, now - 2 * s.window - s.baseline, key=lambda h: h[0])
    history = history[max(first - 1, 0) :]
    t = np.fromiter((h[0] for h in history), dtype=np.float64, count=len(history))
    r = np.fromiter((h[1] for h in history), dtype=np.float64, count=len(history))
    keep = t <= now
    t, r = t[keep], r[keep]
    if t.size == 0:
        return TrendSignal(0.0, False)
    last = float(r[-1])
    x = np.log(np.maximum(r, s.floor_rps))
    start = np.searchsorted(t, t - s.window, side="right") - 1  # the sample a window before
    i = t.size - 1
    if start[i] < 0:
        return TrendSignal(last, False)
    rise = float(x[i] - x[start[i]])
    base = np.nonzero((t > now - s.window - s.baseline) & (t <= now - s.window) & (start >= 0))[0]
    if base.size < MIN_BASELINE:
        return TrendSignal(last, False, rise)
    rises = x[base] - x[start[base]]
    centre = float(np.median(rises))
    noise = max(s.min_noise, 1.4826 * float(np.median(np.abs(rises - centre))))
    score = (rise - centre) / noise
    counts = score > (s.z_off if counting else s.z) and rise > math.log1p(s.min_rise)
    if not counts:
        return TrendSignal(last, False, rise, score, noise)
    recent = t > now - s.window
    growth = float(np.polyfit(t[recent], x[recent], 1)[0]) if recent.sum() >= 2 else 0.0
    factor = min(math.exp(max(growth, 0.0) * lead), s.max_factor)
    return TrendSignal(last * max(factor, 1.0), True, rise, score, noise)


class TrendForecaster:
    """:func:`trend_forecast` with its state (hysteresis, hold) remembered between answers."""

    def __init__(self, settings: TrendSettings | None = None) -> None:
        self.settings = settings or TrendSettings()
        self.state = TrendState()
        self.last: TrendSignal | None = None

    def predict(self, history: Sequence[tuple[float, float]], now: float, lead: float) -> float:
        signal, self.state = trend_forecast(history, now, lead, self.settings, self.state)
        self.last = signal
        return signal.rate


class SeasonalForecaster:
    """The autoscaler's seasonal forecast (:class:`fleetshare.autoscaling.forecast.
    Forecaster`: Holt-Winters with a daily season, sampled as peaks per ``step_seconds``) of
    the request rate, its point forecast plus error band over the lead; never below the
    latest sample (a falling forecast removes nothing ahead of time).

    It keeps its own samples (up to the spec's ``history_seconds``, 7 days: the season needs
    two days and more, longer than the history a caller may keep), is fed only the samples
    it has not seen, and refits on a schedule of samples (``refit_every_samples``, 12 of 5
    minutes: every hour), following the samples in between with the fitted model; it is
    seasonal once the history allows (two seasons and ten samples), a damped Holt trend
    before that, the last sample before ten samples."""

    def __init__(self, step_seconds: float = 300.0, refit_every_samples: int = 12) -> None:
        from fleetshare.autoscaling.forecast import Forecaster as Model
        from fleetshare.autoscaling.forecast import ForecastSpec

        self.spec = ForecastSpec(step_seconds=step_seconds, refit_every_samples=refit_every_samples)
        self.model = Model(self.spec)
        self._seen: float | None = None
        self.last: Forecast | None = None

    def predict(self, history: Sequence[tuple[float, float]], now: float, lead: float) -> float:
        if not history:
            return 0.0
        new = []
        for at, value in reversed(history):
            if self._seen is not None and at <= self._seen:
                break
            new.append((at, value))
        for at, value in reversed(new):
            self.model.observe(at, value)
        self._seen = history[-1][0]
        ahead = self.model.forecast(now, max(lead, 1.0))
        self.last = ahead
        return max(history[-1][1], ahead.upper)
