"""Generated traffic patterns, the forecaster stand-in and traffic read from files."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fleetshare.inference.forecast import (
    TrendForecaster,
    TrendSettings,
    TrendSignal,
    TrendState,
    trend_forecast,
)
from fleetshare.inference.spec import CsvTrafficSpec, PatternSpec
from fleetshare.inference.traffic import generate
from fleetshare.inputs import InputError
from fleetshare.traces.request_rates import from_csv


def test_viral_ramp_grows_tenfold_within_the_ramp_and_holds() -> None:
    t = generate(
        PatternSpec(
            pattern="viral-ramp",
            base_rps=40,
            at_seconds=600,
            ramp_seconds=300,
            duration_seconds=1800,
            step_seconds=15,
        )
    )
    assert t.at(599) == 40
    assert t.at(750) == pytest.approx(40 * 10**0.5)
    assert t.at(900) == pytest.approx(400)
    assert t.at(1799) == pytest.approx(400)
    assert t.at(1800) == 0  # after the end


def test_office_hours_step_on_weekdays_only() -> None:
    t = generate(
        PatternSpec(
            pattern="office-hours",
            base_rps=5,
            peak_rps=50,
            duration_seconds=7 * 86_400,
            step_seconds=300,
        )
    )
    monday_10 = 10 * 3600
    assert t.at(monday_10) == 50
    assert t.at(8 * 3600) == 5
    assert t.at(5 * 86_400 + 10 * 3600) == 5  # Saturday


def test_diurnal_peaks_at_its_hour() -> None:
    t = generate(PatternSpec(pattern="diurnal", base_rps=10, peak_rps=100, peak_hour=14))
    assert t.at(14 * 3600) == pytest.approx(100)
    assert t.at(2 * 3600) == pytest.approx(10)


def test_flash_crowd_rises_then_decays() -> None:
    t = generate(
        PatternSpec(
            pattern="flash-crowd",
            base_rps=10,
            peak_rps=110,
            at_seconds=600,
            ramp_seconds=60,
            decay_seconds=600,
            duration_seconds=7200,
            step_seconds=1,
        )
    )
    assert t.at(660) == pytest.approx(110)
    assert t.at(1260) == pytest.approx(10 + 100 / 2.718281828, rel=1e-3)


def test_noise_is_seeded() -> None:
    spec = {"pattern": "diurnal", "base_rps": 10, "noise": 0.1}
    a = generate(PatternSpec.model_validate({**spec, "seed": 3}))
    b = generate(PatternSpec.model_validate({**spec, "seed": 3}))
    c = generate(PatternSpec.model_validate({**spec, "seed": 4}))
    assert a == b and a.rates != c.rates


def _flat_then(last: float, base: float = 10.0, now: float = 3000.0) -> list[tuple[float, float]]:
    """Every 30 s up to ``now``: ``base`` throughout, then ``last`` at ``now``."""
    return [(float(t), base) for t in range(0, int(now), 30)] + [(now, last)]


def test_a_trend_counts_when_significant_against_the_noise_and_is_capped() -> None:
    """A flat baseline: every rise over the window is 0 (median 0, MAD 0), so the noise is
    ``min_noise`` 0.03. A last sample of 13 after 10s rises log(1.3) = 0.262, a score of
    8.75 > z 8: it counts. The least-squares slope of (-90, -60, -30, 0) s against log
    (10, 10, 10, 13) is log(1.3) / 100 per second, extended over the lead."""
    s = TrendSettings()
    signal, state = trend_forecast(_flat_then(13), 3000, 60, s)
    assert signal.counts and state.counting
    assert signal.score == pytest.approx(math.log(1.3) / 0.03)
    assert signal.rate == pytest.approx(13 * 1.3**0.6)
    capped, _ = trend_forecast(_flat_then(13), 3000, 600, s)  # 1.3**6 = 4.8 > max_factor
    assert capped.rate == pytest.approx(13 * 1.75)
    # 12: log(1.2) / 0.03 = 6.08, below z: the latest rate, unless it counted before (z_off 4)
    weak, state = trend_forecast(_flat_then(12), 3000, 60, s)
    assert not weak.counts and weak.rate == 12 and not state.counting
    kept, _ = trend_forecast(_flat_then(12), 3000, 60, s, TrendState(counting=True))
    assert kept.counts and kept.rate == pytest.approx(12 * 1.2**0.6)
    falling, _ = trend_forecast(_flat_then(5), 3000, 60, s)
    assert not falling.counts and falling.rate == 5


def test_a_noisy_baseline_raises_the_bar_and_a_short_one_never_counts() -> None:
    """A baseline repeating log offsets (0, 0, 0, 0, d, d, d, d) every 30 s: its rises over 120
    s (four samples) are +d and -d, 16 each in 960 s, so the median is 0 and the noise 1.4826
    d; a doubling then scores log 2 / (1.4826 log 1.1) = 4.9: it does not count, where after
    a flat baseline it scores 23."""
    s = TrendSettings(baseline=960)
    now = 3000.0
    history = [(float(t), 10 * 1.1 ** ((t // 30) % 8 >= 4)) for t in range(0, int(now), 30)]
    history.append((now, 2 * history[-4][1]))
    signal, _ = trend_forecast(history, now, 60, s)
    assert signal.noise == pytest.approx(1.4826 * math.log(1.1))
    assert signal.score == pytest.approx(math.log(2) / (1.4826 * math.log(1.1)))
    assert not signal.counts and signal.rate == history[-1][1]
    flat, _ = trend_forecast(_flat_then(20), now, 60, s)
    assert flat.counts
    # fewer than ten rises of baseline (here 7: samples 120..300 s): no noise known, no trend
    early = [(float(t), 10.0) for t in range(0, 421, 30)] + [(450.0, 100.0)]
    assert trend_forecast(early, 450, 60, s)[0] == TrendSignal(100.0, False, math.log(10))


def test_a_counted_forecast_is_held_for_the_lead() -> None:
    """The forecast made while the trend counted stands ``hold`` seconds (default the lead),
    then the latest rate again."""
    f = TrendForecaster()
    up = f.predict(_flat_then(13), 3000, 600)
    assert up == pytest.approx(13 * 1.75)
    later = [*_flat_then(13), (3030.0, 10.0)]
    assert f.predict(later, 3030, 600) == pytest.approx(up)  # no longer counting: held
    assert not f.state.counting
    done = [*later, (3600.0, 10.0)]
    assert f.predict(done, 3600, 600) == 10  # 600 s after: the hold is over


def test_the_seasonal_forecaster_refits_on_a_schedule_and_turns_seasonal() -> None:
    """Fed a sample every 10 minutes for 2.2 days, asked at every one: it refits every 12
    samples (not at every ask), is a damped Holt trend until two days and ten samples, then
    seasonal."""
    from fleetshare.inference.forecast import SeasonalForecaster

    f = SeasonalForecaster(step_seconds=600, refit_every_samples=12)
    history: list[tuple[float, float]] = []
    methods = []
    for k in range(312):
        t = 600.0 * k
        history.append((t, 100 + 80 * math.sin(2 * math.pi * t / 86_400)))
        f.predict(history[-10:], t, 1800)
        assert f.last is not None
        methods.append(f.last.method)
    assert f.model.fits <= 312 // 12 + 2
    assert methods[250] == "holt" and methods[-1] == "holt-winters"


def test_csv_traffic_and_its_errors(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("time,rps\n0,5\n60,7\n120,9\n")
    t = from_csv(CsvTrafficSpec(csv="t.csv"), tmp_path)
    assert t.at(61) == 7 and t.end == 180
    (tmp_path / "bad.csv").write_text("time,rps\n0,5\n60,x\n")
    with pytest.raises(InputError, match="row 3: rps 'x' is not a number"):
        from_csv(CsvTrafficSpec(csv="bad.csv"), tmp_path)
    (tmp_path / "back.csv").write_text("time,rps\n0,5\n60,7\n30,9\n")
    with pytest.raises(InputError, match="row 4: time must increase"):
        from_csv(CsvTrafficSpec(csv="back.csv"), tmp_path)


def test_dlrm_demand_curve_is_live_instances_times_the_assumed_rate() -> None:
    from fleetshare.inference.spec import DlrmTrafficSpec
    from fleetshare.traces.common import data_root
    from fleetshare.traces.dlrm import FILE, read_instances, trace_end
    from fleetshare.traces.request_rates import from_dlrm

    spec = DlrmTrafficSpec(role="HN", rps_per_instance=2, start_day=1, days=0.5, step_seconds=600)
    traffic, note = from_dlrm(spec)
    instances = read_instances(data_root() / FILE)
    end = trace_end(instances)
    at = 86_400 + 3 * 600  # the fourth sample of day 1
    live = sum(
        1
        for i in instances
        if i.role == "HN"
        and (i.creation if i.creation is not None else 0.0) <= at
        and at < (i.deletion if i.deletion is not None else end)
    )
    assert traffic.at(3 * 600) == pytest.approx(2 * live)
    assert traffic.end == pytest.approx(43_200)
    assert "an assumption" in note


def test_the_seasonal_forecaster_sees_the_daily_rise_the_trend_cannot() -> None:
    """``forecast: {model: holt-winters}`` is the autoscaler's Holt-Winters forecaster on the
    traffic: after three days of a daily cycle it forecasts the rise six hours ahead, where
    the recent trend (flat at the trough) sees nothing coming."""
    import math

    from fleetshare.inference.forecast import SeasonalForecaster

    day = 86_400

    def rate(t: float) -> float:
        return 100 + 80 * math.sin(2 * math.pi * t / day)

    history = [(float(t), rate(t)) for t in range(0, 3 * day, 300)]
    now = 3 * day - 300.0
    ahead = 6 * 3600
    truth = rate(now + ahead)
    assert SeasonalForecaster().predict(history, now, ahead) >= 0.97 * truth
    assert TrendForecaster(TrendSettings(window=300)).predict(history, now, ahead) < 0.6 * truth
