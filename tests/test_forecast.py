"""The demand forecaster: sampling, the seasonal model, refits on a sample budget."""

from __future__ import annotations

import numpy as np
import pytest

from fleetshare.autoscaling.forecast import (
    Forecaster,
    ForecastSpec,
    forecast_demand,
    sample_peaks,
)

HOUR = 3600.0
SPEC = ForecastSpec(step_seconds=HOUR, season_seconds=24 * HOUR, history_seconds=7 * 24 * HOUR)


def daily(hours: int, base: float = 100.0, swing: float = 40.0, trend: float = 0.0) -> np.ndarray:
    """Hourly demand with a daily cycle (peak at 14:00) and a linear trend per hour."""
    h = np.arange(hours, dtype=np.float64)
    return base + swing * np.sin(2 * np.pi * (h - 8) / 24) + trend * h


def test_sample_peaks_takes_the_peak_of_each_step_and_only_ended_steps() -> None:
    # 5 from t=0, a 2-second burst to 9 at t=12, 3 from t=25
    first, peaks = sample_peaks([0, 12, 14, 25], [5, 9, 5, 3], step=10, until=39)
    assert first == 0
    assert peaks.tolist() == [5, 9, 5]  # step [30, 40) has not ended at 39
    # a value holds across steps without change points; before the first point it is 0
    first, peaks = sample_peaks([15], [4], step=10, until=50)
    assert first == 1
    assert peaks.tolist() == [4, 4, 4, 4]


def test_sample_peaks_rejects_bad_history() -> None:
    with pytest.raises(ValueError, match="times must not decrease"):
        sample_peaks([5, 1], [1, 1], 10, 20)
    with pytest.raises(ValueError, match="differ in length"):
        sample_peaks([1, 2], [1], 10, 20)


def test_seasonal_forecast_anticipates_the_daily_rise() -> None:
    y = daily(6 * 24)  # six days, ending at midnight
    times = np.arange(y.size) * HOUR
    now = y.size * HOUR
    # demand rises from 06:00 to its peak at 14:00; at 09:00 the next 3 hours peak at 12:00
    early = forecast_demand(times, y, now, 3 * HOUR, SPEC)
    assert early.method == "holt-winters"
    assert early.samples == y.size
    truth = daily(6 * 24 + 3)[-3:]
    assert np.allclose(early.points, truth, atol=2.0)
    later = forecast_demand(
        np.arange(y.size + 9) * HOUR, daily(6 * 24 + 9), (y.size + 9) * HOUR, 3 * HOUR, SPEC
    )
    # the forecast peak is the peak of the next three hours: near the daily maximum
    assert later.peak == pytest.approx(daily(6 * 24 + 12)[-3:].max(), abs=2.0)
    assert later.upper >= later.peak


def test_the_trend_is_followed() -> None:
    y = daily(6 * 24, trend=0.5)
    times = np.arange(y.size) * HOUR
    fc = forecast_demand(times, y, y.size * HOUR, 24 * HOUR, SPEC)
    truth = daily(7 * 24, trend=0.5)[-24:]
    # a damped trend under-shoots a steady one a little over a day, but follows it
    assert np.abs(np.asarray(fc.points) - truth).max() < 8.0
    flat = forecast_demand(times, daily(6 * 24), y.size * HOUR, 24 * HOUR, SPEC)
    assert np.mean(fc.points) > np.mean(flat.points) + 60


def test_band_is_the_quantile_of_one_step_errors() -> None:
    rng = np.random.default_rng(0)
    clean = daily(6 * 24)
    noisy = clean + rng.normal(0, 5, clean.size)
    times = np.arange(clean.size) * HOUR
    quiet = forecast_demand(times, clean, clean.size * HOUR, HOUR, SPEC)
    loud = forecast_demand(times, noisy, clean.size * HOUR, HOUR, SPEC)
    assert quiet.band < 1.0
    assert 3.0 < loud.band < 20.0  # about the 99th percentile of N(0, 5)
    lower = forecast_demand(
        times, noisy, clean.size * HOUR, HOUR, SPEC.model_copy(update={"quantile": 0.5})
    )
    assert lower.band < loud.band


def test_short_histories_fall_back() -> None:
    few = forecast_demand([0, HOUR], [3, 7], 2 * HOUR, HOUR, SPEC)
    assert few.method == "last-value"
    assert few.points == (7.0,)
    day = daily(30)
    holt = forecast_demand(np.arange(30) * HOUR, day, 30 * HOUR, HOUR, SPEC)
    assert holt.method == "holt"  # less than two seasons: no season
    assert forecast_demand([], [], 10.0, 5.0, SPEC).points == (0.0,)
    with pytest.raises(ValueError, match="horizon_seconds must be positive"):
        forecast_demand([0], [1], 10.0, 0.0, SPEC)


def test_forecaster_refits_on_a_sample_budget_not_on_calls() -> None:
    spec = SPEC.model_copy(update={"refit_every_samples": 24})
    y = daily(8 * 24)
    fc = Forecaster(spec)
    for i in range(6 * 24):
        fc.observe(i * HOUR, float(y[i]))
    first = fc.forecast(6 * 24 * HOUR, HOUR)
    for _ in range(5):  # asking again at the same moment fits nothing
        assert fc.forecast(6 * 24 * HOUR, HOUR) == first
    assert fc.fits == 1
    # right after a fit it answers as a fresh fit on the same samples would
    fresh = forecast_demand(np.arange(6 * 24) * HOUR, y[: 6 * 24], 6 * 24 * HOUR, HOUR, spec)
    assert first.points == pytest.approx(fresh.points)
    for i in range(6 * 24, 8 * 24):
        fc.observe(i * HOUR, float(y[i]))
        fc.forecast((i + 1) * HOUR, HOUR)
    assert fc.fits == 1 + 2  # 48 new samples, one refit per 24


def test_forecaster_follows_new_samples_between_refits() -> None:
    """Between refits the fitted model runs over the new samples: the answer is what the
    same parameters give over the whole series, and it follows a sudden change."""
    spec = SPEC.model_copy(update={"refit_every_samples": 1000})
    y = daily(7 * 24)
    y[-3:] += 50  # a jump in the last three hours
    fc = Forecaster(spec)
    for i in range(6 * 24):
        fc.observe(i * HOUR, float(y[i]))
    before = fc.forecast(6 * 24 * HOUR, HOUR)
    for i in range(6 * 24, 7 * 24):
        fc.observe(i * HOUR, float(y[i]))
    after = fc.forecast(7 * 24 * HOUR, HOUR)
    assert fc.fits == 1
    assert after.samples == 7 * 24
    assert after.points[0] > daily(7 * 24 + 1)[-1] + 10  # the jump is followed
    assert after.band == before.band  # the band is the fit's

    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    fit = fc._fit
    assert fit is not None
    p = fit.results.params
    whole = ExponentialSmoothing(
        y,
        trend="add",
        damped_trend=True,
        seasonal="add",
        seasonal_periods=24,
        initialization_method="known",
        initial_level=p["initial_level"],
        initial_trend=p["initial_trend"],
        initial_seasonal=p["initial_seasons"],
    ).fit(
        smoothing_level=p["smoothing_level"],
        smoothing_trend=p["smoothing_trend"],
        smoothing_seasonal=p["smoothing_seasonal"],
        damping_trend=p["damping_trend"],
        optimized=False,
    )
    assert after.points == pytest.approx(tuple(whole.forecast(1)), rel=1e-6)


def test_forecaster_is_deterministic_and_checks_time_order() -> None:
    y = daily(5 * 24) + np.random.default_rng(1).normal(0, 3, 5 * 24)
    answers = []
    for _ in range(2):
        fc = Forecaster(SPEC.model_copy(update={"refit_every_samples": 10}))
        out = []
        for i in range(5 * 24):
            fc.observe(i * HOUR + 7, float(y[i]))
            out.append(fc.forecast(i * HOUR + 30, 2 * HOUR))
        answers.append(out)
    assert answers[0] == answers[1]
    with pytest.raises(ValueError, match="before"):
        fc.observe(0.0, 1.0)


def test_spec_rejects_bad_fields() -> None:
    with pytest.raises(ValueError, match="quantile"):
        ForecastSpec(quantile=1.5)
    with pytest.raises(ValueError, match="refit_every_samples"):
        ForecastSpec(refit_every_samples=0)
