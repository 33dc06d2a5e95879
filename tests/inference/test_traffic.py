"""Generated traffic patterns, the forecaster stand-in and traffic read from files."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetshare.inference.forecast import TrendForecaster
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


def test_forecaster_extends_a_rising_trend_and_ignores_noise() -> None:
    f = TrendForecaster(window=120, min_rise=0.25)
    rising = [(t, 10 * 2 ** (t / 60)) for t in range(0, 121, 15)]  # doubles each minute
    assert f.predict(rising, 120, 60) == pytest.approx(80, rel=1e-6)
    flat = [(t, 10 + (0.2 if t % 30 else -0.2)) for t in range(0, 121, 15)]
    assert f.predict(flat, 120, 300) == flat[-1][1]
    falling = [(t, 100 - t / 2) for t in range(0, 121, 15)]
    assert f.predict(falling, 120, 60) == falling[-1][1]


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

    from fleetshare.inference.forecast import SeasonalForecaster, TrendForecaster

    day = 86_400

    def rate(t: float) -> float:
        return 100 + 80 * math.sin(2 * math.pi * t / day)

    history = [(float(t), rate(t)) for t in range(0, 3 * day, 300)]
    now = 3 * day - 300.0
    ahead = 6 * 3600
    truth = rate(now + ahead)
    assert SeasonalForecaster().predict(history, now, ahead) >= 0.97 * truth
    assert TrendForecaster(300).predict(history, now, ahead) < 0.6 * truth
