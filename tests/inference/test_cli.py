"""`simulate` and `scenario run` on scenarios with services."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetshare.cli import app
from fleetshare.scenario.loader import ScenarioError, load_scenario
from fleetshare.scenario.runner import run_scenario


@pytest.mark.slow  # two simulated days of traffic
def test_simulate_compares_the_options_on_the_same_traffic(tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = CliRunner().invoke(
        app,
        [
            "simulate",
            "inference-diurnal",
            "-p",
            "reactive",
            "-p",
            "scheduled",
            "--json",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data["options"]) == {"reactive", "scheduled"}
    reactive = data["options"]["reactive"]
    scheduled = data["options"]["scheduled"]
    # the office-hours floor keeps replicas the scaler would not: more GPU-hours, fewer
    # capacity-short minutes on the same traffic
    assert scheduled["cluster"]["gpu_hours"] > reactive["cluster"]["gpu_hours"]
    assert (
        scheduled["services"]["chat"]["capacity_short_minutes"]
        < reactive["services"]["chat"]["capacity_short_minutes"]
    )
    assert data["versus_reactive"]["reactive"]["extra_gpu_hours"] == 0
    assert (out / "services.json").exists() and (out / "inference-diurnal-tradeoff.png").exists()


def test_simulate_refuses_unknown_options() -> None:
    result = CliRunner().invoke(app, ["simulate", "inference-diurnal", "-p", "static"])
    assert result.exit_code == 2
    assert "for services, choose from reactive" in result.output


def test_the_plain_runner_refuses_services_rather_than_ignore_them() -> None:
    from fleetshare.cli import bundled_scenarios

    path = next(p for p in bundled_scenarios() if p.stem == "inference-diurnal")
    with pytest.raises(ScenarioError, match="has services"):
        run_scenario(load_scenario(path))


def test_a_floor_with_an_impossible_schedule_is_refused_when_the_scenario_loads(
    tmp_path: Path,
) -> None:
    """``0 25 * * 1-5`` (hour 25) was accepted and failed mid-run with croniter's words and
    no field: ``[0 25 * * 1-5] is not acceptable, out of range``."""
    from fleetshare.cli import bundled_scenarios

    source = next(p for p in bundled_scenarios() if p.stem == "inference-diurnal")
    bad = tmp_path / "bad-floor.yaml"
    bad.write_text(source.read_text().replace('"0 9 * * 1-5"', '"0 25 * * 1-5"'))
    with pytest.raises(ScenarioError, match=r"floors\[0\]\.schedule.*not a valid cron"):
        load_scenario(bad)
    result = CliRunner().invoke(app, ["simulate", str(bad)], env={"COLUMNS": "1000"})
    assert result.exit_code == 2
    assert "services[0](chat).floors[0].schedule" in result.output
    assert "'0 25 * * 1-5' is not a valid cron expression" in result.output


def test_a_service_error_names_the_file(tmp_path: Path) -> None:
    """Errors in a service's team or priority named the field but not the file, unlike every
    other scenario error."""
    from fleetshare.cli import bundled_scenarios

    source = next(p for p in bundled_scenarios() if p.stem == "inference-diurnal")
    bad = tmp_path / "bad-priority.yaml"
    bad.write_text(source.read_text().replace("priority: inference", "priority: inferenc"))
    result = CliRunner().invoke(app, ["simulate", str(bad)], env={"COLUMNS": "1000"})
    assert result.exit_code == 2
    assert f"error: {bad}: services[0](chat).priority: unknown priority class" in result.output
