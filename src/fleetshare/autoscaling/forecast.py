"""Demand forecasts per pool: a seasonal baseline plus the recent trend (Holt-Winters).

The input is a demand history as a step function -- change points ``times`` (seconds, any
origin, increasing) and the ``values`` that hold from each until the next -- and a horizon.
The history is sampled on a fixed grid of ``step_seconds`` (step ``k`` covers
``[k * step, (k + 1) * step)``; its sample is the *peak* demand within it, so a burst shorter
than a step is not averaged away), and only steps that ended by ``now`` count.

The model is statsmodels' additive Holt-Winters (``ExponentialSmoothing``: additive damped
trend, additive season of ``season_seconds``, heuristic initialisation, parameters fitted by
maximum likelihood), fitted on at most ``history_seconds`` of samples. With less than two
seasons plus ten samples the season cannot be estimated and a damped Holt trend is fitted
instead; with fewer than ten samples the forecast is the last sample.

The forecast demand is the peak of the point forecast over the horizon's steps plus a band:
the ``quantile`` of the model's one-step in-sample errors (observed minus fitted, after the
first season), never negative. Nothing reads a clock and every fit is deterministic.

:func:`forecast_demand` fits afresh each call. :class:`Forecaster` is the same model for a
loop that asks often: it refits on a budget of samples (after ``refit_every_samples`` new
ones), and in between runs the fitted model's recursions (its last states and fitted
parameters, through statsmodels) over the samples that arrived since, so each answer still
follows the latest demand.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
from pydantic import ConfigDict, Field

from fleetshare.inputs import StrictModel

DAY = 86_400.0
MIN_SAMPLES = 10
"""Below this many samples there is no model: the forecast is the last sample."""

Method = Literal["holt-winters", "holt", "last-value"]


class ForecastSpec(StrictModel):
    """How demand is forecast (see the module docstring)."""

    model_config = ConfigDict(frozen=True)

    method: Literal["holt-winters"] = "holt-winters"
    step_seconds: float = Field(default=600.0, ge=1, description="sampling step (peak per step)")
    season_seconds: float = Field(default=DAY, gt=0, description="length of one season")
    history_seconds: float = Field(
        default=7 * DAY, gt=0, description="fit on at most this much recent history"
    )
    refit_every_samples: int = Field(
        default=72, ge=1, description="Forecaster: refit after this many new samples"
    )
    quantile: float = Field(
        default=0.99, gt=0, lt=1, description="band: this quantile of one-step errors"
    )

    def period(self) -> int:
        """Samples per season (at least 2)."""
        return max(2, round(self.season_seconds / self.step_seconds))

    def max_samples(self) -> int:
        """Samples kept for a fit."""
        return max(MIN_SAMPLES, math.ceil(self.history_seconds / self.step_seconds))


@dataclass(frozen=True)
class Forecast:
    """Forecast demand at ``at`` for ``horizon`` seconds."""

    at: float
    horizon: float
    points: tuple[float, ...]
    """The point forecast per step over the horizon."""
    band: float
    """What is added for the model's error (the quantile of its one-step errors, >= 0)."""
    method: Method
    samples: int
    """Samples the model saw."""

    @property
    def peak(self) -> float:
        """The highest point forecast over the horizon (never negative)."""
        return max(0.0, *self.points)

    @property
    def upper(self) -> float:
        """The forecast demand: the peak plus the band."""
        return self.peak + self.band


def sample_peaks(
    times: Sequence[float] | np.ndarray,
    values: Sequence[float] | np.ndarray,
    step: float,
    until: float,
) -> tuple[int, np.ndarray]:
    """(index of the first step, peak demand of every step that ended by ``until``) for the
    step function of ``times``/``values`` (the value before the first change point is 0)."""
    t = np.asarray(times, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if t.size != v.size:
        raise ValueError(f"times and values differ in length ({t.size} vs {v.size})")
    if t.size == 0:
        return 0, np.zeros(0)
    if np.any(np.diff(t) < 0):
        raise ValueError("times must not decrease")
    first = math.floor(t[0] / step)
    last = math.floor(until / step)  # steps first .. last-1 have ended
    if last <= first:
        return first, np.zeros(0)
    starts = np.arange(first, last, dtype=np.float64) * step
    at_start = np.searchsorted(t, starts, side="right") - 1
    peaks = np.where(at_start >= 0, v[np.clip(at_start, 0, None)], 0.0)
    inside = t < last * step
    np.maximum.at(peaks, (np.floor(t[inside] / step) - first).astype(np.int64), v[inside])
    return first, peaks


def _steps(horizon: float, step: float) -> int:
    return max(1, math.ceil(horizon / step))


@contextmanager
def _quiet() -> Iterator[None]:
    """statsmodels warns of convergence and of a perfect fit (its AIC's log of 0): the fit is
    used as it is."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


@dataclass
class _Fit:
    method: Method
    results: Any
    """statsmodels' HoltWintersResults (None for last-value)."""
    samples: int
    band: float


def _fit(y: np.ndarray, spec: ForecastSpec) -> _Fit:
    if y.size < MIN_SAMPLES:
        return _Fit("last-value", None, int(y.size), 0.0)
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    period = spec.period()
    seasonal = y.size >= 2 * period + MIN_SAMPLES
    with _quiet():
        model = ExponentialSmoothing(
            y,
            trend="add",
            damped_trend=True,
            seasonal="add" if seasonal else None,
            seasonal_periods=period if seasonal else None,
            initialization_method="heuristic" if seasonal else "estimated",
        )
        results = model.fit()
    skip = period if seasonal else 1
    errors = y[skip:] - np.asarray(results.fittedvalues)[skip:]
    band = max(0.0, float(np.quantile(errors, spec.quantile))) if errors.size else 0.0
    return _Fit("holt-winters" if seasonal else "holt", results, int(y.size), band)


def _points(fit: _Fit, y: np.ndarray, steps: int, period: int) -> np.ndarray:
    """The point forecast after ``y`` (the fit's samples, then any that came since)."""
    if fit.method == "last-value":
        return np.full(steps, float(y[-1]) if y.size else 0.0)
    results = fit.results
    new = y.size - fit.samples
    if new <= 0:
        with _quiet():
            return np.asarray(results.forecast(steps), dtype=np.float64)
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    # continue the fitted recursions: states before the fit's last sample, then that sample
    # and the new ones (statsmodels takes no single-sample series)
    params = results.params
    seasonal = fit.method == "holt-winters"
    with _quiet():
        model = ExponentialSmoothing(
            y[fit.samples - 1 :],
            trend="add",
            damped_trend=True,
            seasonal="add" if seasonal else None,
            seasonal_periods=period if seasonal else None,
            initialization_method="known",
            initial_level=float(results.level[-2]),
            initial_trend=float(results.trend[-2]),
            initial_seasonal=(np.asarray(results.season[-period - 1 : -1]) if seasonal else None),
        )
        again = model.fit(
            smoothing_level=params["smoothing_level"],
            smoothing_trend=params["smoothing_trend"],
            smoothing_seasonal=params["smoothing_seasonal"] if seasonal else None,
            damping_trend=params["damping_trend"],
            optimized=False,
        )
        return np.asarray(again.forecast(steps), dtype=np.float64)


def forecast_demand(
    times: Sequence[float] | np.ndarray,
    values: Sequence[float] | np.ndarray,
    now: float,
    horizon_seconds: float,
    spec: ForecastSpec | None = None,
) -> Forecast:
    """The forecast demand for the ``horizon_seconds`` after ``now`` from the demand history
    ``times``/``values`` (a step function; only steps that ended by ``now`` are used)."""
    spec = spec or ForecastSpec()
    if horizon_seconds <= 0:
        raise ValueError(f"horizon_seconds must be positive, got {horizon_seconds}")
    _, y = sample_peaks(times, values, spec.step_seconds, now)
    y = y[-spec.max_samples() :]
    fit = _fit(y, spec)
    points = _points(fit, y, _steps(horizon_seconds, spec.step_seconds), spec.period())
    return Forecast(now, horizon_seconds, tuple(map(float, points)), fit.band, fit.method, y.size)


class Forecaster:
    """Forecasts of one demand series for a control loop: :meth:`observe` each change of
    demand, :meth:`forecast` when needed. Refits after ``refit_every_samples`` new samples
    (never on time), and follows the samples in between with the fitted model."""

    def __init__(self, spec: ForecastSpec | None = None) -> None:
        self.spec = spec or ForecastSpec()
        self._times: list[float] = []
        self._values: list[float] = []
        self._samples = np.zeros(0)
        self._next_step: int | None = None
        """Index of the first step not sampled yet."""
        self._fit: _Fit | None = None
        self._since_fit = 0
        self.fits = 0
        """How many times the model was fitted."""
        self._last: tuple[tuple[int | None, float], Forecast] | None = None
        """The latest answer: samples change only when a step ends."""

    def observe(self, at: float, value: float) -> None:
        """Demand is ``value`` from ``at`` on (times must not decrease)."""
        if self._times and at < self._times[-1]:
            raise ValueError(f"demand observed at {at} before {self._times[-1]}")
        if self._values and value == self._values[-1]:
            return
        if self._times and at == self._times[-1]:
            self._values[-1] = value
            if len(self._values) > 1 and self._values[-2] == value:
                self._times.pop()
                self._values.pop()
            return
        self._times.append(at)
        self._values.append(value)

    def _sample(self, now: float) -> None:
        step = self.spec.step_seconds
        if not self._times:
            return
        last = math.floor(now / step)
        if self._next_step is not None and last <= self._next_step:
            return
        first, peaks = sample_peaks(self._times, self._values, step, now)
        begin = first if self._next_step is None else self._next_step
        new = peaks[begin - first :]
        keep = self.spec.max_samples()
        self._samples = np.concatenate((self._samples, new))
        self._since_fit += new.size
        self._next_step = begin + new.size
        # the change points before the last step sampled are no longer needed
        cut = int(np.searchsorted(self._times, self._next_step * step, side="right")) - 1
        if cut > 0:
            del self._times[:cut]
            del self._values[:cut]
        if self._samples.size > 2 * keep:  # a fit keeps its own copy
            self._samples = self._samples[-keep:]
            self._fit = None

    def forecast(self, now: float, horizon_seconds: float) -> Forecast:
        """The forecast demand for ``horizon_seconds`` after ``now``."""
        if horizon_seconds <= 0:
            raise ValueError(f"horizon_seconds must be positive, got {horizon_seconds}")
        self._sample(now)
        if self._last is not None and self._last[0] == (self._next_step, horizon_seconds):
            return replace(self._last[1], at=now)
        y = self._samples
        if self._fit is None or self._since_fit >= self.spec.refit_every_samples:
            y = y[-self.spec.max_samples() :]
            self._samples = y
            self._fit = _fit(y, self.spec)
            self._since_fit = 0
            self.fits += 1
        fit = self._fit
        steps = _steps(horizon_seconds, self.spec.step_seconds)
        points = _points(fit, y[-(fit.samples + self._since_fit) :], steps, self.spec.period())
        out = Forecast(
            now, horizon_seconds, tuple(map(float, points)), fit.band, fit.method, y.size
        )
        self._last = ((self._next_step, horizon_seconds), out)
        return out
