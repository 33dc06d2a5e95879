"""Names that read as something else are refused on every way in (issue 28, item 5): NUL and
other control characters (they forge log lines and break terminals), newlines, invisible
formatting characters (a right-to-left override makes ``evil\u202egnp.sh`` read as
``evilhs.png``), and ``.`` / ``..`` (paths and URLs resolve them away). One check,
``inputs.check_name``, behind the policy, scenario, node-pool and submission schemas."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from fleetshare.cli import app
from fleetshare.inputs import check_name
from fleetshare.service.api import create_app
from fleetshare.service.auth import create_token
from fleetshare.service.config import load_config
from fleetshare.service.plane import ControlPlane
from fleetshare.service.store import Store

BAD = {
    "nul": "team\x00a",
    "newline": "team\nINFO admitted everything",
    "rtl override": "evil\u202egnp",
    "zero width": "team\u200ba",
    "dot dot": "..",
    "dot": ".",
}
GOOD = ["team-a", "équipe", "研究", "ml.g5.8xlarge", "a_b"]


@pytest.mark.parametrize("name", GOOD)
def test_ordinary_names_are_names(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize("name", list(BAD.values()), ids=list(BAD))
def test_a_name_that_reads_as_something_else_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="a name may not"):
        check_name(name)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    plane = ControlPlane(load_config(None), Store(f"sqlite:///{tmp_path / 'fleetshare.db'}"))
    token = create_token(plane.store, "admin")[1]
    with TestClient(create_app(plane)) as test_client:
        test_client.headers["Authorization"] = f"Bearer {token}"
        yield test_client
    plane.store.close()


@pytest.mark.parametrize("name", list(BAD.values()), ids=list(BAD))
def test_the_api_refuses_them_naming_the_field(client: TestClient, name: str) -> None:
    job = {"name": name, "team": "team-a", "requests": {"cpu": 1}}
    response = client.post("/api/v1/workloads", json=job)
    assert response.status_code == 422, response.text
    assert ["body", "name"] in [d["loc"] for d in response.json()["detail"]]
    policy = {"teams": [{"name": name, "quota": [{"resources": {"cpu": 1}}]}]}
    response = client.put("/api/v1/policy", json={"policy": policy})
    assert response.status_code == 422, response.text
    assert "a name may not" in response.text


@pytest.mark.parametrize("name", list(BAD.values()), ids=list(BAD))
def test_files_refuse_them_in_one_line(tmp_path: Path, name: str) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"teams": [{"name": name, "quota": [{"resources": {"cpu": 1}}]}]}))
    result = CliRunner().invoke(app, ["policy", "validate", str(policy)])
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and "a name may not" in result.output
    assert "teams[0].name: " in result.output and len(result.output.splitlines()) == 2
