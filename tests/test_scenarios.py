"""The bundled scenarios reproduce the references' public cases; the CLI keeps its contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetshare.cli import app, bundled_scenarios
from fleetshare.scenario.expect import mismatches
from fleetshare.scenario.loader import ScenarioError, load_scenario, load_scenario_data
from fleetshare.scenario.report import to_json
from fleetshare.scenario.runner import run_scenario

SCENARIOS = {p.stem: p for p in bundled_scenarios()}
REQUIRED = {
    "hyperpod-walkthrough",
    "hyperpod-walkthrough-json",
    "kueue-borrowing",
    "kueue-borrowing-limit",
    "kueue-lending-limit",
    "kueue-reclaim",
    "kueue-fair-share",
}


def run(name: str) -> dict[str, object]:
    return to_json(run_scenario(load_scenario(SCENARIOS[name])))


def test_the_reference_cases_are_bundled() -> None:
    assert set(SCENARIOS) >= REQUIRED


@pytest.mark.parametrize(
    "name",
    [  # services simulate a day of traffic every 15 s: slow on 2 shared cores
        pytest.param(n, marks=pytest.mark.slow) if load_scenario(p).spec.services else n
        for n, p in sorted(SCENARIOS.items())
    ],
)
def test_bundled_scenario_meets_its_expectations(name: str) -> None:
    scenario = load_scenario(SCENARIOS[name])
    assert scenario.expect, "every bundled scenario states its expected outcome"
    if scenario.spec.services:  # replicas follow traffic: the services runner
        from fleetshare.simulate.service_compare import run_as_written

        _, data = run_as_written(SCENARIOS[name])
        assert mismatches(scenario.expect, data) == []
        return
    assert mismatches(scenario.expect, to_json(run_scenario(scenario))) == []


@pytest.mark.parametrize("name", ["hyperpod-walkthrough", "hyperpod-walkthrough-json"])
def test_hyperpod_walkthrough_borrow_reclaim_then_priority(name: str) -> None:
    wl = run(name)["workloads"]
    assert isinstance(wl, dict)
    assert wl["a-training"]["borrowed"] == {"nvidia.com/gpu": 1}
    assert wl["a-training"]["preemptions"] == [{"at": 60, "by": "b-training", "reason": "reclaim"}]
    assert wl["b-training"]["preemptions"] == [
        {"at": 120, "by": "b-inference", "reason": "priority"}
    ]
    assert wl["b-inference"]["state"] == "admitted"


def test_kueue_docs_borrowing_a_uses_all_21_cpu_while_b_is_idle() -> None:
    result = run("kueue-borrowing")
    assert result["workloads"]["a-sweep"]["borrowed"] == {"cpu": 12}  # type: ignore[index]


def test_kueue_reclaim_exactly_one_victim() -> None:
    wl = run("kueue-reclaim")["workloads"]
    victims = [n for n, w in wl.items() if w["preemptions"]]  # type: ignore[union-attr]
    assert victims == ["c2-mid"]


def test_json_output_has_the_documented_shape() -> None:
    result = CliRunner().invoke(app, ["scenario", "run", "hyperpod-walkthrough", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert set(data) >= {"workloads", "teams", "events"}
    workload = data["workloads"]["a-training"]
    assert set(workload) >= {
        "state",
        "admitted_at",
        "finished_at",
        "preemptions",
        "borrowed",
        "pending_reason",
    }
    assert workload["state"] in {"admitted", "pending", "finished", "preempted"}
    assert set(data["teams"]["team-a"]) >= {"quota", "used", "borrowed"}
    assert data["teams"]["team-a"]["quota"]["nvidia.com/gpu"] == 2


def test_text_output_is_a_timeline_and_failed_expectations_exit_1(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["scenario", "run", "kueue-reclaim"])
    assert ok.exit_code == 0
    assert "preempt  c2-mid by c1-incoming (reclaim)" in ok.output
    assert "expectations: as expected" in ok.output
    text = SCENARIOS["kueue-reclaim"].read_text().replace("reason: reclaim", "reason: priority")
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(text)
    bad = runner.invoke(app, ["scenario", "run", str(wrong)])
    assert bad.exit_code == 1
    assert "NOT as expected" in bad.output


def test_failed_expectations_with_json_say_why_on_stderr(tmp_path: Path) -> None:
    """``--json`` keeps stdout one JSON object; the exit code 1 once came with no reason."""
    text = SCENARIOS["kueue-reclaim"].read_text().replace("reason: reclaim", "reason: priority")
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(text)
    bad = CliRunner().invoke(app, ["scenario", "run", str(wrong), "--json"])
    assert bad.exit_code == 1
    assert json.loads(bad.stdout)["scenario"] == "kueue-reclaim"  # its name: field
    assert "NOT as expected" in bad.stderr and "expected 'priority', got 'reclaim'" in bad.stderr


def test_invalid_scenario_names_the_field_and_reason(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "cluster: {nodes: [{name: n, allocatable: {cpu: 4}}]}\n"
        "policy: {teams: [{name: a, quota: [{resources: {cpu: lots}}]}]}\n"
        "workloads: [{name: j, team: a, requests: {cpu: 1}}]\n"
    )
    result = CliRunner().invoke(app, ["scenario", "run", str(path)])
    assert result.exit_code == 2
    assert "teams[0](a).quota[0].resources" in result.output
    assert "not a Kubernetes quantity: 'lots'" in result.output


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"cluster": {"nodes": []}, "workloads": []},
            "give exactly one of policy, kueue, hyperpod",
        ),
        (
            {
                "cluster": {"nodes": [{"instance_type": "p9.huge"}]},
                "policy": {"teams": []},
            },
            "unknown instance type 'p9.huge'",
        ),
        (
            {
                "cluster": {"nodes": [{"name": "n", "allocatable": {"cpu": 1}}]},
                "policy": {"teams": [{"name": "a"}]},
                "workloads": [
                    {"name": "j", "team": "a", "priority": "vip", "requests": {"cpu": 1}}
                ],
            },
            "workloads[0](j).priority: unknown priority class 'vip'",
        ),
    ],
)
def test_scenario_errors_are_clear(data: dict[str, object], message: str) -> None:
    with pytest.raises(ScenarioError, match=None) as info:
        load_scenario_data(data, Path("."))
    assert message in str(info.value)


def test_policy_import_then_validate_round_trip(tmp_path: Path) -> None:
    runner = CliRunner()
    fixture = Path(__file__).parent / "fixtures" / "hyperpod_walkthrough.json"
    imported = runner.invoke(app, ["policy", "import", "hyperpod", str(fixture)])
    assert imported.exit_code == 0, imported.output
    path = tmp_path / "policy.yaml"
    path.write_text(imported.stdout)
    checked = runner.invoke(app, ["policy", "validate", str(path)])
    assert checked.exit_code == 0, checked.output
    assert "team team-a: cpu=63.7 on ml.g5.8xlarge" in checked.output
    assert "nvidia.com/gpu=2 on ml.g5.8xlarge" in checked.output


def test_policy_validate_rejects_with_field_and_reason(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "cluster: {priority_classes: [{name: x, weight: 101}]}\n"
        "teams: [{name: a, sharing: Borrow, quota: [{count: 1, vcpu: 2}]}]\n"
    )
    result = CliRunner().invoke(app, ["policy", "validate", str(path)])
    assert result.exit_code == 2
    assert "cluster.priority_classes[0](x).weight" in result.output
    assert "teams[0](a).sharing" in result.output
    assert "count gives whole instances" in result.output


def test_the_diurnal_scenario_describes_its_own_settings() -> None:
    """``scenario run`` prints the description; it once gave 3% noise and a floor of 25
    replicas from 08:30 to 17:30 while the file had 8% and 34 from 09:00 to 17:00."""
    scenario = load_scenario(SCENARIOS["inference-diurnal"])
    text = " ".join(scenario.description.split())
    service = scenario.spec.services[0]
    noise = service.traffic.pattern.noise
    floor = service.floors[0]
    hour = int(floor.schedule.split()[1])
    end = hour + floor.duration_seconds / 3600
    assert f"{noise:.0%} noise" in text, text
    assert f"floor of {floor.min_replicas} replicas from {hour:02d}:00 to {int(end):02d}:00" in text
