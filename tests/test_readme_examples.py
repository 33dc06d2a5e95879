"""The README's tour commands on the files under examples/ run as the README says."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fleetshare.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
COMMANDS = sorted(
    set(
        re.findall(
            r"\.venv/bin/fleetshare (policy (?:validate|import) [^\s`>]+(?: [^\s`>#]+)?)", README
        )
    )
)


def test_the_tour_names_the_policy_commands() -> None:
    assert any(c.startswith("policy validate examples/") for c in COMMANDS)
    assert any(c.startswith("policy import kueue examples/") for c in COMMANDS)
    assert any(c.startswith("policy import hyperpod examples/") for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_policy_command_of_the_tour_runs(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(app, command.split())
    assert result.exit_code == 0, result.output
    if command.startswith("policy validate"):
        assert result.stdout.startswith("valid:")
    else:  # the conversion is a fleetshare policy that validates in turn
        converted = yaml.safe_load(result.stdout)
        assert converted["teams"]


def test_the_policy_shown_in_the_readme_is_the_example_file() -> None:
    block = README.split("fleetshare's own format (YAML or JSON):", 1)[1]
    shown = block.split("```yaml", 1)[1].split("```", 1)[0]
    example = (ROOT / "examples" / "policy.yaml").read_text(encoding="utf-8")
    assert yaml.safe_load(shown) == yaml.safe_load(example)


def test_the_plan_command_of_the_tour_runs_as_described(monkeypatch: pytest.MonkeyPatch) -> None:
    """Launches, the LP lower bound, the pod no pool can run with its reason, exit code 1."""
    command = re.findall(r"`fleetshare (plan --pools [^`]+)`", README)[0]
    assert "exit code is 1" in README.split(command, 1)[1].split("6. ", 1)[0]
    monkeypatch.chdir(ROOT)
    text = CliRunner().invoke(app, command.split(), env={"COLUMNS": "200"})
    assert text.exit_code == 1, text.output
    assert "LP lower bound" in text.stdout
    assert "cannot place 1 pods of cpu=1000 (too-big): no instance type" in text.stdout
    data = json.loads(CliRunner().invoke(app, [*command.split(), "--json"]).stdout)
    assert data["launches"] and data["unplaceable"][0]["workloads"] == ["too-big"]


def test_the_scenario_json_shown_in_the_tour_matches_the_run() -> None:
    """The README's excerpt of ``scenario run hyperpod-walkthrough --json``: same values."""
    shown = README.split("Add `--json` for one machine-readable object:", 1)[1]
    shown = shown.split("```json", 1)[1].split("```", 1)[0]
    result = CliRunner().invoke(app, ["scenario", "run", "hyperpod-walkthrough", "--json"])
    data = json.loads(result.stdout)
    a = data["workloads"]["a-training"]
    for key in ("state", "borrowed"):
        assert f'"{key}": {json.dumps(a[key])}' in shown
    assert float(re.findall(r'"admitted_at": ([0-9.]+)', shown)[0]) == a["admitted_at"]
    assert json.dumps(a["preemptions"][0]) in shown
    assert f'"placement": {json.dumps(a["placement"])}' in shown
