"""Kubernetes manifests submitted to a real ``fleetshare serve`` (POST /api/v1/workloads and
``fleetshare job submit``): the team from the queue label, team tokens kept to their own
team, errors naming the document and field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from fleetshare.cli import app
from fleetshare.service.auth import create_token
from fleetshare.service.store import Store
from tests.service_helpers import Server, start_server, wait_for

CONFIG = """
name: manifests
cluster:
  nodes: [{instance_type: ml.g5.8xlarge, count: 4, zone: us-east-1a}]
policy:
  cluster:
    priority_classes: [{name: training, weight: 70}]
  teams:
    - name: team-a
      local_queues: [ml-a/training]
      quota: [{instance_type: ml.g5.8xlarge, count: 2}]
    - name: team-b
      local_queues: [ml-b/training]
      quota: [{instance_type: ml.g5.8xlarge, count: 2}]
"""

FIXTURES = Path(__file__).parent / "fixtures" / "manifests"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    workdir = tmp_path_factory.mktemp("manifests")
    config = workdir / "config.yaml"
    config.write_text(CONFIG)
    srv = start_server(f"sqlite:///{workdir / 'fleetshare.db'}", workdir, config)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def tokens(server: Server) -> dict[str, str]:
    store = Store(server.db)
    out = {s: create_token(store, s)[1] for s in ("admin", "viewer", "team:team-a")}
    store.close()
    return out


@pytest.fixture
def admin(server: Server, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(tokens["admin"]) as client:
        yield client


@pytest.fixture
def team_a(server: Server, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(tokens["team:team-a"]) as client:
        yield client


def job(name: str, namespace: str = "ml-a", gpus: int = 1, **labels: str) -> dict[str, Any]:
    """A batch/v1 Job of ``gpus`` one-GPU pods in the LocalQueue ``training``."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/queue-name": "training", **labels},
            "annotations": {"fleetshare.io/duration": "1h"},
        },
        "spec": {
            "parallelism": gpus,
            "completions": gpus,
            "template": {
                "spec": {
                    "priorityClassName": "training",
                    "containers": [
                        {
                            "name": "main",
                            "image": "trainer:1",
                            "resources": {
                                "requests": {"cpu": "1500m", "memory": "8Gi"},
                                "limits": {"nvidia.com/gpu": 1},
                            },
                        }
                    ],
                    "tolerations": [{"key": "gpu", "operator": "Exists"}],
                }
            },
        },
    }


YAML = {"content-type": "application/yaml"}


def test_a_job_manifest_as_json_is_a_workload_of_its_queues_team(team_a: httpx.Client) -> None:
    response = team_a.post("/api/v1/workloads", json=job("mf-json", gpus=2))
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["team"] == "team-a" and body["pods"] == 2
    assert body["priority_class"] == "training" and body["priority"] == 70
    (podset,) = body["spec"]["podsets"]
    assert podset["count"] == 2
    assert podset["requests"] == {"cpu": "1500m", "memory": 8 * 2**30, "nvidia.com/gpu": 1}
    toleration = {"key": "gpu", "operator": "Exists"}
    assert podset["tolerations"] == [toleration]
    assert body["spec"]["duration"] == 3600
    assert body["spec"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    wait_for(lambda: team_a.get("/api/v1/workloads/mf-json").json()["state"] == "admitted")
    team = team_a.get("/api/v1/teams/team-a").json()
    assert team["used"]["nvidia.com/gpu"] >= 2
    team_a.delete("/api/v1/workloads/mf-json")


def test_a_manifest_as_yaml_text(admin: httpx.Client) -> None:
    text = yaml.safe_dump(job("mf-yaml", namespace="ml-b"))
    response = admin.post("/api/v1/workloads", content=text, headers=YAML)
    assert response.status_code == 201, response.text
    assert response.json()["team"] == "team-b"
    admin.delete("/api/v1/workloads/mf-yaml")


def test_fixture_kinds_are_accepted(admin: httpx.Client) -> None:
    """A JobSet, a RayJob and a pod group (several documents: one workload)."""
    for name, queue in (("jobset.yaml", "ml-a/training"), ("rayjob.yaml", "ml-a/training")):
        docs = list(yaml.safe_load_all((FIXTURES / name).read_text()))
        assert len(docs) == 1
        doc = docs[0]
        doc["metadata"]["labels"] = {"fleetshare.io/team": "team-a"}
        response = admin.post("/api/v1/workloads", json=doc)
        assert response.status_code == 201, (name, queue, response.text)
        assert response.json()["team"] == "team-a"
        admin.delete(f"/api/v1/workloads/{response.json()['name']}")
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": "worker-",
                "namespace": "ml-a",
                "labels": {
                    "kueue.x-k8s.io/queue-name": "training",
                    "kueue.x-k8s.io/pod-group-name": "mf-group",
                },
                "annotations": {"kueue.x-k8s.io/pod-group-total-count": "2"},
            },
            "spec": {
                "containers": [
                    {"name": "c", "resources": {"limits": {"cpu": 1, "nvidia.com/gpu": 1}}}
                ]
            },
        }
    ] * 2
    text = yaml.safe_dump_all(pods)
    response = admin.post("/api/v1/workloads", content=text, headers=YAML)
    assert response.status_code == 201, response.text
    assert response.json()["name"] == "mf-group" and response.json()["pods"] == 2
    admin.delete("/api/v1/workloads/mf-group")


def test_a_team_token_submits_only_to_its_team_leaking_nothing(
    team_a: httpx.Client, admin: httpx.Client
) -> None:
    other = team_a.post("/api/v1/workloads", json=job("mf-b", namespace="ml-b"))
    unknown = team_a.post("/api/v1/workloads", json=job("mf-x", namespace="nowhere"))
    native_other = team_a.post(
        "/api/v1/workloads", json={"name": "n", "team": "team-b", "requests": {"cpu": 1}}
    )
    native_unknown = team_a.post(
        "/api/v1/workloads", json={"name": "n", "team": "secret-team", "requests": {"cpu": 1}}
    )
    responses = (other, unknown, native_other, native_unknown)
    named = ("ml-b/training", "nowhere/training", "team-b", "secret-team")
    assert {r.status_code for r in responses} == {403}
    # each names what it asked for (and why that is refused), and is otherwise the same
    for response, queue in zip(responses, named, strict=True):
        assert f"{queue!r} is not team team-a" in response.json()["detail"], response.text
    bodies = {r.text.replace(queue, "Q") for r, queue in zip(responses, named, strict=True)}
    assert len(bodies) == 1 and "team-b" not in bodies.pop()
    assert admin.get("/api/v1/workloads/mf-b").status_code == 404


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d["spec"].update(parallelism=-1), ["body (Job ml-a/bad)", "spec.parallelism"]),
        (lambda d: d["metadata"].pop("name"), ["metadata.name", "is required"]),
        (
            lambda d: d["metadata"]["labels"].update({"kueue.x-k8s.io/queue-name": "nope"}),
            ["metadata.labels.kueue.x-k8s.io/queue-name", "unknown team or queue"],
        ),
        (lambda d: d["metadata"].pop("labels"), ["metadata.labels", "no queue"]),
        (lambda d: d.update(kind="CronJob"), ["CronJob"]),
        (
            lambda d: d["spec"]["template"]["spec"].update(priorityClassName="vip"),
            ["priorityClassName", "unknown priority class"],
        ),
    ],
)
def test_bad_manifests_are_422_naming_the_field(
    admin: httpx.Client, change: Any, words: list[str]
) -> None:
    doc = job("bad")
    change(doc)
    response = admin.post("/api/v1/workloads", json=doc)
    assert response.status_code == 422, response.text
    detail = json.dumps(response.json()["detail"])
    for word in words:
        assert word in detail
    assert admin.get("/api/v1/workloads/bad").status_code == 404


def test_bad_yaml_and_two_workloads_in_one_body(admin: httpx.Client) -> None:
    response = admin.post("/api/v1/workloads", content="a: [1,\n", headers=YAML)
    assert response.status_code == 422 and "not valid YAML: line" in response.text
    text = yaml.safe_dump_all([job("two-1"), job("two-2")])
    response = admin.post("/api/v1/workloads", content=text, headers=YAML)
    assert response.status_code == 422 and "describes 2 workloads" in response.text
    response = admin.post("/api/v1/workloads", content="", headers=YAML)
    assert response.status_code == 422


def test_a_viewer_cannot_submit_a_manifest(server: Server, tokens: dict[str, str]) -> None:
    with server.client(tokens["viewer"]) as viewer:
        response = viewer.post("/api/v1/workloads", json=job("v"))
    assert response.status_code == 403


def test_cli_submits_multi_document_manifests(
    server: Server, tokens: dict[str, str], tmp_path: Path, admin: httpx.Client
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "cli-pod-0",
            "namespace": "ml-a",
            "labels": {
                "kueue.x-k8s.io/queue-name": "training",
                "kueue.x-k8s.io/pod-group-name": "cli-group",
            },
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": "2"},
        },
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": 1}}}]},
    }
    pod2 = json.loads(json.dumps(pod))
    pod2["metadata"]["name"] = "cli-pod-1"
    native = {"name": "cli-native", "team": "team-a", "requests": {"cpu": 1}}
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump_all([job("cli-job-1"), pod, job("cli-job-2"), pod2, native]))
    result = CliRunner().invoke(
        app,
        ["job", "submit", str(path), "--server", server.url, "--token", tokens["team:team-a"]],
    )
    assert result.exit_code == 0, result.output
    for name in ("cli-job-1", "cli-group", "cli-job-2", "cli-native"):
        assert f"submitted {name} (team team-a)" in result.stdout
        assert admin.get(f"/api/v1/workloads/{name}").status_code == 200
        admin.delete(f"/api/v1/workloads/{name}")
