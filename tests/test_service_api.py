"""The REST API of a real ``fleetshare serve`` process, over HTTP on loopback.

One server per store (SQLite, then PostgreSQL when installed; the bundled default config: four
ml.g5.8xlarge with one GPU each; team-a and team-b, quota two GPUs each, borrowing up to one);
every test cleans up the work it submitted.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from fleetshare.service import store as tables
from fleetshare.service.auth import TOKEN_CACHE_SECONDS, create_token, revoke_token
from fleetshare.service.store import Store
from tests.service_helpers import (
    Server,
    config_file_listing,
    job,
    sample_value,
    start_server,
    wait_for,
)

NOTHING = "http://127.0.0.1:9"
"""The one Prometheus server the tests' config lists: nothing answers there (services keep
their replicas)."""


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    workdir = tmp_path_factory.mktemp("service")
    if request.param == "postgresql":
        db = request.getfixturevalue("postgresql").database()
    else:
        db = f"sqlite:///{workdir / 'fleetshare.db'}"
    srv = start_server(db, workdir, config_file_listing(workdir, {"nothing": NOTHING}))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def tokens(server: Server) -> dict[str, str]:
    store = Store(server.db)
    out = {
        scope: create_token(store, scope)[1]
        for scope in ("admin", "viewer", "team:team-a", "team:team-b")
    }
    store.close()
    return out


@pytest.fixture(scope="module")
def admin(server: Server, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(tokens["admin"]) as client:
        yield client


@pytest.fixture(scope="module")
def team_a(server: Server, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(tokens["team:team-a"]) as client:
        yield client


@pytest.fixture(scope="module")
def team_b(server: Server, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(tokens["team:team-b"]) as client:
        yield client


@pytest.fixture(scope="module")
def viewer(server: Server, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(tokens["viewer"]) as client:
        yield client


@pytest.fixture(autouse=True)
def clean(admin: httpx.Client) -> Iterator[None]:
    """Delete the services a test left, cancel whatever it left pending or admitted, and
    restore the first policy."""
    first = admin.get("/api/v1/policy").json()
    yield
    for service in admin.get("/api/v1/services").json():
        admin.delete(f"/api/v1/services/{service['name']}")
    for state in ("pending", "admitted"):
        for item in admin.get("/api/v1/workloads", params={"state": state}).json()["items"]:
            admin.delete(f"/api/v1/workloads/{item['name']}")
    if admin.get("/api/v1/policy").json()["version"] != first["version"]:
        admin.put("/api/v1/policy", json={"policy": first["policy"]}).raise_for_status()


def state_of(client: httpx.Client, name: str) -> str:
    response = client.get(f"/api/v1/workloads/{name}")
    response.raise_for_status()
    state: str = response.json()["state"]
    return state


def admitted(client: httpx.Client, name: str) -> bool:
    return state_of(client, name) == "admitted"


# -- the spec and auth ----------------------------------------------------------------------------


def test_openapi_lists_the_endpoints(server: Server) -> None:
    spec = httpx.get(f"{server.url}/openapi.json").json()
    paths = set(spec["paths"])
    assert {
        "/api/v1/policy",
        "/api/v1/teams",
        "/api/v1/teams/{team}",
        "/api/v1/workloads",
        "/api/v1/workloads/{name}",
        "/api/v1/workloads/{name}/explain",
        "/api/v1/nodes",
        "/api/v1/nodes/{name}/cordon",
        "/api/v1/nodes/{name}/uncordon",
        "/api/v1/nodes/{name}/drain",
        "/api/v1/nodepools",
        "/api/v1/events",
        "/api/v1/services",
        "/api/v1/services/{name}",
        "/metrics",
    } <= paths
    assert "HTTPBearer" in spec["components"]["securitySchemes"]


ENDPOINTS = [
    ("GET", "/api/v1/policy"),
    ("PUT", "/api/v1/policy"),
    ("GET", "/api/v1/teams"),
    ("GET", "/api/v1/teams/team-a"),
    ("PUT", "/api/v1/teams/team-a"),
    ("DELETE", "/api/v1/teams/team-a"),
    ("POST", "/api/v1/workloads"),
    ("GET", "/api/v1/workloads"),
    ("GET", "/api/v1/workloads/x"),
    ("DELETE", "/api/v1/workloads/x"),
    ("GET", "/api/v1/workloads/x/explain"),
    ("GET", "/api/v1/nodes"),
    ("POST", "/api/v1/nodes/g5.8xlarge-0/cordon"),
    ("POST", "/api/v1/nodes/g5.8xlarge-0/uncordon"),
    ("POST", "/api/v1/nodes/g5.8xlarge-0/drain"),
    ("GET", "/api/v1/nodepools"),
    ("PUT", "/api/v1/nodepools"),
    ("GET", "/api/v1/events"),
    ("GET", "/api/v1/events/stream"),
    ("GET", "/api/v1/services"),
    ("POST", "/api/v1/services"),
    ("GET", "/api/v1/services/x"),
    ("PUT", "/api/v1/services/x"),
    ("DELETE", "/api/v1/services/x"),
    ("POST", "/api/v1/what-if"),
    ("GET", "/api/v1/cluster"),
    ("GET", "/api/v1/whoami"),
    ("GET", "/metrics"),
]
"""Every operation that needs a token, once (checked against the spec below)."""


def test_endpoints_lists_every_operation_that_needs_a_token(server: Server) -> None:
    spec = httpx.get(f"{server.url}/openapi.json").json()
    wanted = {
        (method.upper(), path)
        for path, operations in spec["paths"].items()
        for method, operation in operations.items()
        if operation.get("security")
    }
    listed = set()
    for method, concrete in ENDPOINTS:
        for template in spec["paths"]:
            if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", template), concrete):
                listed.add((method, template))
    assert wanted == listed


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_every_endpoint_wants_a_valid_token(server: Server, method: str, path: str) -> None:
    body = {"json": job("x", "team-a")} if method in ("POST", "PUT") else {}
    for headers in (
        {},
        {"Authorization": "Bearer fs_not-a-token"},
        {"Authorization": "Basic YWRtaW46YWRtaW4="},
    ):
        response = httpx.request(method, f"{server.url}{path}", headers=headers, **body)
        assert response.status_code == 401, (headers, response.text)
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json() == {"detail": "missing or invalid bearer token"}


def test_a_revoked_token_is_refused(server: Server) -> None:
    store = Store(server.db)
    token_id, token = create_token(store, "viewer")
    with server.client(token) as client:
        assert client.get("/api/v1/nodes").status_code == 200
        assert revoke_token(store, token_id)
        # a server trusts a token it checked for TOKEN_CACHE_SECONDS (generous margin here)
        deadline = time.monotonic() + TOKEN_CACHE_SECONDS + 5
        while client.get("/api/v1/nodes").status_code == 200:
            assert time.monotonic() < deadline, "the revoked token is still accepted"
            time.sleep(0.05)
        assert client.get("/api/v1/nodes").status_code == 401
    with store.read("workloads-read") as conn:
        hashes = conn.execute(select(tables.api_tokens.c.token_hash)).scalars().all()
    assert token not in hashes and all(len(h) == 64 for h in hashes)  # sha256, never the token
    store.close()


# -- a team token never reads or changes another team's work, nor the policy ---------------------


_serial = itertools.count()


@pytest.fixture
def b_work(team_b: httpx.Client) -> str:
    name = f"b-secret-{next(_serial)}"
    response = team_b.post("/api/v1/workloads", json=job(name, "team-b"))
    assert response.status_code == 201, response.text
    wait_for(lambda: admitted(team_b, name))
    return name


def test_team_token_list_shows_only_its_team(team_a: httpx.Client, b_work: str) -> None:
    assert team_a.post("/api/v1/workloads", json=job("a-mine", "team-a")).status_code == 201
    assert team_a.get("/api/v1/workloads/a-mine").status_code == 200
    names = {w["name"] for w in team_a.get("/api/v1/workloads").json()["items"]}
    assert "a-mine" in names and b_work not in names
    assert team_a.get("/api/v1/workloads", params={"team": "team-b"}).json()["items"] == []


@pytest.mark.parametrize("suffix", ["", "/explain"])
def test_team_token_gets_404_for_another_teams_workload(
    team_a: httpx.Client, b_work: str, suffix: str
) -> None:
    theirs = team_a.get(f"/api/v1/workloads/{b_work}{suffix}")
    missing = team_a.get(f"/api/v1/workloads/no-such{suffix}")
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["detail"].replace(b_work, "N") == missing.json()["detail"].replace(
        "no-such", "N"
    )


def test_team_token_cannot_cancel_another_teams_workload(
    team_a: httpx.Client, team_b: httpx.Client, b_work: str
) -> None:
    assert team_a.delete(f"/api/v1/workloads/{b_work}").status_code == 404
    assert state_of(team_b, b_work) == "admitted"


def test_team_token_cannot_submit_for_another_team(
    team_a: httpx.Client, admin: httpx.Client
) -> None:
    response = team_a.post("/api/v1/workloads", json=job("a-as-b", "team-b"))
    assert response.status_code == 403
    assert admin.get("/api/v1/workloads/a-as-b").status_code == 404


def test_team_token_sees_only_its_team(team_a: httpx.Client, b_work: str) -> None:
    assert [t["name"] for t in team_a.get("/api/v1/teams").json()] == ["team-a"]
    assert team_a.get("/api/v1/teams/team-b").status_code == 404
    assert team_a.get("/api/v1/teams/team-a").status_code == 200
    nodes = team_a.get("/api/v1/nodes").json()
    assert all(b_work not in n["workloads"] for n in nodes)


def test_team_token_events_are_its_own(team_a: httpx.Client, b_work: str) -> None:
    team_a.post("/api/v1/workloads", json=job("a-events", "team-a"))
    items = team_a.get("/api/v1/events", params={"limit": 1000}).json()["items"]
    assert items and {e["team"] for e in items} == {"team-a"}
    assert all(b_work not in json.dumps(e) for e in items)


def test_team_token_cannot_read_or_change_the_policy(
    team_a: httpx.Client, admin: httpx.Client
) -> None:
    before = admin.get("/api/v1/policy").json()
    assert team_a.get("/api/v1/policy").status_code == 403
    changed = {**before["policy"], "teams": before["policy"]["teams"][:1]}
    assert team_a.put("/api/v1/policy", json={"policy": changed}).status_code == 403
    assert team_a.get("/metrics").status_code == 403
    assert admin.get("/api/v1/policy").json()["version"] == before["version"]


def test_viewer_reads_everything_and_changes_nothing(
    viewer: httpx.Client, admin: httpx.Client, b_work: str
) -> None:
    assert viewer.get(f"/api/v1/workloads/{b_work}").status_code == 200
    assert len(viewer.get("/api/v1/teams").json()) == 2
    assert viewer.get("/api/v1/policy").status_code == 200
    assert viewer.get("/metrics").status_code == 200
    assert viewer.post("/api/v1/workloads", json=job("v", "team-a")).status_code == 403
    assert viewer.delete(f"/api/v1/workloads/{b_work}").status_code == 403
    policy = viewer.get("/api/v1/policy").json()
    assert viewer.put("/api/v1/policy", json={"policy": policy["policy"]}).status_code == 403
    assert admin.get("/api/v1/policy").json()["version"] == policy["version"]


def _service(name: str, team: str) -> dict[str, Any]:
    """A live service whose Prometheus is not there (it keeps zero replicas)."""
    query = {"server": "nothing", "query": "up"}
    trigger = {"metric": "rps", "target": 5, "prometheus": query}
    return {
        "name": name,
        "team": team,
        "replica": {"requests": {"cpu": 1}},
        "scaler": {"polling_interval_seconds": 1, "triggers": [trigger]},
    }


def test_team_token_sees_and_touches_only_its_teams_services(
    team_a: httpx.Client, team_b: httpx.Client, viewer: httpx.Client, admin: httpx.Client
) -> None:
    assert team_b.post("/api/v1/services", json=_service("b-svc", "team-b")).status_code == 201
    assert team_a.post("/api/v1/services", json=_service("a-svc", "team-a")).status_code == 201
    assert team_a.post("/api/v1/services", json=_service("a-as-b", "team-b")).status_code == 403
    assert [s["name"] for s in team_a.get("/api/v1/services").json()] == ["a-svc"]
    for method in ("GET", "DELETE"):
        theirs = team_a.request(method, "/api/v1/services/b-svc")
        missing = team_a.request(method, "/api/v1/services/no-such")
        assert theirs.status_code == missing.status_code == 404
        assert theirs.json()["detail"].replace("b-svc", "N") == missing.json()["detail"].replace(
            "no-such", "N"
        )
    assert [s["name"] for s in viewer.get("/api/v1/services").json()] == ["b-svc", "a-svc"]
    assert viewer.get("/api/v1/services/b-svc").json()["team"] == "team-b"
    assert viewer.post("/api/v1/services", json=_service("v-svc", "team-a")).status_code == 403
    assert viewer.delete("/api/v1/services/b-svc").status_code == 403
    assert team_b.get("/api/v1/services/b-svc").status_code == 200
    assert admin.delete("/api/v1/services/b-svc").status_code == 200
    assert [s["name"] for s in admin.get("/api/v1/services").json()] == ["a-svc"]
    actions, after = [], 0
    while after is not None:
        page = admin.get("/api/v1/events", params={"after": after, "limit": 1000}).json()
        actions += [
            e["details"]["action"]
            for e in page["items"]
            if e["kind"] == "service" and e["details"]["service"] == "b-svc"
        ]
        after = page["next_after"]
    assert actions[-2:] == ["register", "delete"]


# -- workloads ------------------------------------------------------------------------------------


def test_submit_admit_finish(team_a: httpx.Client) -> None:
    response = team_a.post("/api/v1/workloads", json=job("short", "team-a", duration=0.5))
    assert response.status_code == 201
    body = response.json()
    assert body["state"] in ("pending", "admitted") and body["team"] == "team-a"
    wait_for(lambda: state_of(team_a, "short") == "finished", timeout=10)
    done = team_a.get("/api/v1/workloads/short").json()
    assert done["admitted_at"] and done["finished_at"] and done["nodes"]


def test_borrowing_explain_and_cancel(team_a: httpx.Client) -> None:
    for i in range(3):  # quota 2 GPUs, borrow limit 1: all three fit
        assert team_a.post("/api/v1/workloads", json=job(f"w{i}", "team-a")).status_code == 201
    wait_for(lambda: all(admitted(team_a, f"w{i}") for i in range(3)))
    team = team_a.get("/api/v1/teams/team-a").json()
    assert team["quota"]["nvidia.com/gpu"] == 2
    assert team["used"]["nvidia.com/gpu"] == 3
    assert team["borrowed"]["nvidia.com/gpu"] == 1
    team_a.post("/api/v1/workloads", json=job("w3", "team-a"))
    explained = wait_for(
        lambda: (e := team_a.get("/api/v1/workloads/w3/explain").json())["queue_position"] and e
    )
    assert explained["state"] == "pending" and explained["queue_position"] == 1
    assert "borrow limit for nvidia.com/gpu" in explained["reason"]
    assert "limit 1" in explained["reason"]
    assert explained["category"] == "quota"  # as fleetshare_pending_workloads_by_reason counts it
    cancelled = team_a.delete("/api/v1/workloads/w0")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    wait_for(lambda: admitted(team_a, "w3"))
    again = team_a.delete("/api/v1/workloads/w0")
    assert again.status_code == 409 and "cancelled already" in again.json()["detail"]


def test_list_filters_and_pages(admin: httpx.Client, team_a: httpx.Client) -> None:
    for i in range(5):
        team_a.post("/api/v1/workloads", json=job(f"page{i}", "team-a", duration=3600))
    seen: list[str] = []
    after = 0
    while True:
        page = admin.get(
            "/api/v1/workloads", params={"team": "team-a", "after": after, "limit": 2}
        ).json()
        assert len(page["items"]) <= 2
        seen += [w["name"] for w in page["items"]]
        if page["next_after"] is None:
            break
        after = page["next_after"]
    assert [n for n in seen if n.startswith("page")] == [f"page{i}" for i in range(5)]
    pending = admin.get("/api/v1/workloads", params={"state": "pending"}).json()["items"]
    assert all(w["state"] == "pending" for w in pending)
    assert admin.get("/api/v1/workloads", params={"limit": 0}).status_code == 422
    assert admin.get("/api/v1/workloads", params={"state": "nope"}).status_code == 422


def test_duplicate_names_conflict(team_a: httpx.Client) -> None:
    assert team_a.post("/api/v1/workloads", json=job("dup", "team-a")).status_code == 201
    response = team_a.post("/api/v1/workloads", json=job("dup", "team-a"))
    assert response.status_code == 409 and "exists already" in response.json()["detail"]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"name": "bad", "team": "team-a", "requests": {"cpu": -1}}, "requests"),
        ({"name": "bad", "team": "team-a", "requests": {"cpu": "1e30"}}, "requests"),
        ({"name": "bad", "team": "team-a", "pods": 0, "requests": {"cpu": 1}}, "pods"),
        ({"name": "bad", "team": "team-a", "requests": {"cpu": 1}, "colour": 1}, "colour"),
        ({"name": "bad", "team": "nobody", "requests": {"cpu": 1}}, "team"),
        ({"name": "bad", "team": "team-a", "priority": "vip", "requests": {"cpu": 1}}, "priority"),
        ({"team": "team-a", "requests": {"cpu": 1}}, "name"),
        # a name the API's paths could not reach: never read, explained or cancelled
        ({"name": "bad/1", "team": "team-a", "requests": {"cpu": 1}}, "name"),
        ({"name": "..", "team": "team-a", "requests": {"cpu": 1}}, "name"),
    ],
)
def test_invalid_workloads_are_422_naming_the_field(
    admin: httpx.Client, spec: dict[str, Any], field: str
) -> None:
    response = admin.post("/api/v1/workloads", json=spec)
    assert response.status_code == 422, response.text
    assert ["body", field] in [item["loc"] for item in response.json()["detail"]], response.text
    assert admin.get("/api/v1/workloads/bad").status_code == 404


def test_a_token_of_a_team_the_policy_lacks_is_told_so(server: Server) -> None:
    """A team:NAME token for a team not in the policy (made before the team, or after it was
    dropped) submitting to NAME is told that its team is not in the policy (422 on ``team``),
    not that it may submit to NAME only; the policy's teams are not listed to it."""
    store = Store(server.db)
    token = create_token(store, "team:team-later")[1]
    store.close()
    with server.client(token) as client:
        response = client.post("/api/v1/workloads", json=job("later", "team-later"))
        assert response.status_code == 422, response.text
        (item,) = response.json()["detail"]
        assert item["loc"] == ["body", "team"] and "team-later" in item["msg"]
        assert "not in the policy" in item["msg"] and "team-a" not in item["msg"]
        manifest = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "later-job", "labels": {"fleetshare.io/team": "team-later"}},
            "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}},
        }
        response = client.post("/api/v1/workloads", json=manifest)
        assert response.status_code == 422, response.text
        assert "not in the policy" in response.text and "team-a" not in response.text
        # another team's name, existing or not, is still the one 403
        for team in ("team-a", "nobody"):
            response = client.post("/api/v1/workloads", json=job("later", team))
            assert response.status_code == 403, response.text


def test_bodies_are_bounded_and_checked(admin: httpx.Client) -> None:
    big = {**job("big", "team-a"), "labels": {f"k{i}": "v" * 100 for i in range(12_000)}}
    assert admin.post("/api/v1/workloads", json=big).status_code == 413
    deep: Any = {"cpu": 1}
    for _ in range(100):
        deep = {"x": deep}
    response = admin.post("/api/v1/workloads", json={**job("deep", "team-a"), "labels": deep})
    assert response.status_code == 422 and "nested more than" in response.text
    raw = b'{"name": "nan", "team": "team-a", "requests": {"cpu": NaN}}'
    headers = {"content-type": "application/json"}
    response = admin.post("/api/v1/workloads", content=raw, headers=headers)
    assert response.status_code == 422 and "finite" in response.text
    raw = b'{"name": "d", "name": "e", "team": "team-a", "requests": {"cpu": 1}}'
    response = admin.post("/api/v1/workloads", content=raw, headers=headers)
    assert response.status_code == 422 and "duplicate key" in response.text
    response = admin.post("/api/v1/workloads", content=b"\xff\xfe", headers=headers)
    assert response.status_code == 422 and "UTF-8" in response.text


def test_nodes_and_events(admin: httpx.Client) -> None:
    nodes = admin.get("/api/v1/nodes").json()
    assert [n["name"] for n in nodes] == [f"g5.8xlarge-{i}" for i in range(4)]
    assert all(n["allocatable"]["nvidia.com/gpu"] == 1 and n["price_per_hour"] for n in nodes)
    admin.post("/api/v1/workloads", json=job("ev", "team-b"))
    wait_for(lambda: admitted(admin, "ev"))
    first = admin.get("/api/v1/events", params={"limit": 2}).json()
    assert len(first["items"]) == 2 and first["next_after"] == first["items"][-1]["id"]
    rest = admin.get("/api/v1/events", params={"after": first["next_after"], "limit": 1000})
    ids = [e["id"] for e in first["items"] + rest.json()["items"]]
    assert ids == sorted(set(ids))
    kinds = [(e["kind"], e["workload"]) for e in rest.json()["items"]]
    assert ("submit", "ev") in kinds and ("admit", "ev") in kinds
    assert kinds.index(("submit", "ev")) < kinds.index(("admit", "ev"))


# -- the policy -----------------------------------------------------------------------------------


def test_policy_change_is_admin_only_and_audited(server: Server, admin: httpx.Client) -> None:
    policy = admin.get("/api/v1/policy").json()
    changed = json.loads(json.dumps(policy["policy"]))
    changed["teams"][0]["borrow_limits"] = [{"percent_of_quota": 100}]
    response = admin.put("/api/v1/policy", json={"policy": changed})
    assert response.status_code == 200, response.text
    assert response.json()["version"] == policy["version"] + 1
    store = Store(server.db)
    with store.read("workloads-read") as conn:
        audit = conn.execute(
            select(tables.audit_log).order_by(tables.audit_log.c.id.desc()).limit(1)
        ).one()
    store.close()
    assert audit.action == "policy-set" and audit.policy_version == policy["version"] + 1
    assert "admin" in audit.actor


def test_policy_as_yaml_kueue_and_hyperpod(admin: httpx.Client) -> None:
    yaml_text = (
        "teams:\n  - name: team-a\n    quota: [{instance_type: ml.g5.8xlarge, count: 2}]\n"
        "  - name: team-b\n    quota: [{instance_type: ml.g5.8xlarge, count: 2}]\n"
    )
    assert admin.put("/api/v1/policy", json={"policy": yaml_text}).status_code == 200
    kueue = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-a}
spec:
  cohort: all
  resourceGroups:
    - coveredResources: [nvidia.com/gpu]
      flavors: [{name: default, resources: [{name: nvidia.com/gpu, nominalQuota: 2}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-b}
spec:
  cohort: all
  resourceGroups:
    - coveredResources: [nvidia.com/gpu]
      flavors: [{name: default, resources: [{name: nvidia.com/gpu, nominalQuota: 2}]}]
"""
    response = admin.put("/api/v1/policy", json={"format": "kueue", "policy": kueue})
    assert response.status_code == 200, response.text
    assert {t["name"] for t in response.json()["policy"]["teams"]} == {"team-a", "team-b"}
    assert response.json()["source_format"] == "kueue"
    hyperpod = [
        {
            "Name": f"{team}-compute-allocation",
            "ComputeQuotaTarget": {"TeamName": team},
            "ComputeQuotaConfig": {
                "ComputeQuotaResources": [{"InstanceType": "ml.g5.8xlarge", "Count": 2}],
                "ResourceSharingConfig": {"Strategy": "LendAndBorrow", "BorrowLimit": 50},
            },
        }
        for team in ("team-a", "team-b")
    ]
    response = admin.put("/api/v1/policy", json={"format": "hyperpod", "policy": hyperpod})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"policy": {"teams": [{"name": "team-a", "quota": [{"count": 2}]}]}}, "teams[0]"),
        ({"policy": {"teams": [{"name": "x", "sharing": "Hoard"}]}}, "sharing"),
        ({"policy": {"tems": []}}, "tems"),
        ({"format": "kueue", "policy": "kind: ClusterQueue\nspec: 3\n"}, "metadata.name"),
        ({"format": "hyperpod", "policy": {"ComputeQuotaConfig": 7}}, "ComputeQuotaConfig"),
        ({"format": "yaml", "policy": {}}, "format"),
    ],
)
def test_invalid_policies_are_422_naming_the_field(
    admin: httpx.Client, body: dict[str, Any], where: str
) -> None:
    before = admin.get("/api/v1/policy").json()["version"]
    response = admin.put("/api/v1/policy", json=body)
    assert response.status_code == 422, response.text
    assert where in json.dumps(response.json()["detail"])
    assert admin.get("/api/v1/policy").json()["version"] == before


def test_a_policy_naming_a_file_does_not_read_it(admin: httpx.Client, tmp_path: Path) -> None:
    secret = tmp_path / "policy.yaml"
    secret.write_text("teams: [{name: team-a}, {name: team-b}]\n")
    for body in (
        {"policy": str(secret)},
        {"format": "kueue", "policy": str(secret)},
        {"format": "hyperpod", "policy": str(secret)},
    ):
        assert admin.put("/api/v1/policy", json=body).status_code == 422


def test_a_policy_may_not_drop_a_team_with_work(admin: httpx.Client, team_b: httpx.Client) -> None:
    team_b.post("/api/v1/workloads", json=job("keep-b", "team-b"))
    policy = admin.get("/api/v1/policy").json()
    only_a = {**policy["policy"], "teams": policy["policy"]["teams"][:1]}
    response = admin.put("/api/v1/policy", json={"policy": only_a})
    assert response.status_code == 409 and "team-b" in response.json()["detail"]


# -- node pools and node operations ---------------------------------------------------------------

POOL = {"name": "spare", "instance_types": ["ml.g5.8xlarge"], "limits": {"nodes": 2, "cpu": 64}}


def test_node_pools_read_by_all_set_by_admins(
    server: Server, admin: httpx.Client, team_a: httpx.Client, viewer: httpx.Client
) -> None:
    before = team_a.get("/api/v1/nodepools").json()  # the default config has none
    assert before == {
        "source": "config", "version": None, "created_at": None, "author": None, "pools": []
    }  # fmt: skip
    for client in (team_a, viewer):
        assert client.put("/api/v1/nodepools", json={"pools": [POOL]}).status_code == 403
    try:
        response = admin.put("/api/v1/nodepools", json={"pools": [POOL]})
        assert response.status_code == 200, response.text
        out = response.json()
        assert out["source"] == "api" and out["author"] and out["version"]
        (pool,) = out["pools"]
        assert pool["spec"] == {k: v for k, v in POOL.items() if k != "name"} | {"name": "spare"}
        assert pool["nodes"] == 0 and pool["used"] == {"nodes": 0}
        assert pool["limits"] == {"nodes": 2, "cpu": 64}
        assert team_a.get("/api/v1/nodepools").json() == out
        store = Store(server.db)
        with store.read("workloads-read") as conn:
            audit = conn.execute(
                select(tables.audit_log).order_by(tables.audit_log.c.id.desc()).limit(1)
            ).one()
        store.close()
        assert audit.action == "nodepools-set" and "admin" in audit.actor
        assert audit.details == {"version": out["version"], "pools": ["spare"]}
    finally:
        admin.put("/api/v1/nodepools", json={"pools": []}).raise_for_status()
    assert admin.get("/api/v1/nodepools").json()["pools"] == []


def test_invalid_node_pools_are_422_naming_the_field(admin: httpx.Client) -> None:
    version = admin.get("/api/v1/nodepools").json()["version"]
    bad = [
        ({"pools": [{**POOL, "instance_types": ["ml.g5.8xlarg"]}]},
         ["body", "pools", 0, "instance_types[0]"], "did you mean"),
        ({"pools": [{**POOL, "zones": ["mars-1a"]}]}, ["body", "pools", 0, "zones"], "mars-1a"),
        ({"pools": [{**POOL, "limits": {"cpu": "lots"}}]}, ["body", "pools", 0, "limits"], ""),
        ({"pools": [{**POOL, "weight": 101}]}, ["body", "pools", 0, "weight"], ""),
        ({"pools": [POOL, POOL]}, ["body"], "unique"),
        ({"pools": [{**POOL, "colour": "red"}]}, ["body", "pools", 0, "colour"], ""),
    ]  # fmt: skip
    for body, loc, words in bad:
        response = admin.put("/api/v1/nodepools", json=body)
        assert response.status_code == 422, (body, response.text)
        detail = response.json()["detail"]
        assert any(d["loc"][: len(loc)] == loc and words in d["msg"] for d in detail), detail
    assert admin.get("/api/v1/nodepools").json()["version"] == version  # nothing stored


def _node(client: httpx.Client, name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(n for n in client.get("/api/v1/nodes").json() if n["name"] == name)
    return found


def test_cordon_uncordon_and_drain_are_admin_only(
    admin: httpx.Client, team_a: httpx.Client, viewer: httpx.Client
) -> None:
    """Three nodes cordoned: of two jobs one runs (on the fourth) and one waits; a drain of
    the fourth requeues its job; an uncordon lets both run again."""
    names = [f"g5.8xlarge-{i}" for i in range(4)]
    for client in (team_a, viewer):
        assert client.post(f"/api/v1/nodes/{names[0]}/cordon").status_code == 403
    assert admin.post("/api/v1/nodes/no-such-node/cordon").status_code == 404
    try:
        for name in names[:3]:
            response = admin.post(f"/api/v1/nodes/{name}/cordon")
            assert response.json() == {"node": name, "action": "cordon", "cordoned": True}
        wait_for(lambda: all(_node(team_a, n)["cordoned"] for n in names[:3]))
        assert not any(_node(team_a, n)["schedulable"] for n in names[:3])
        team_a.post("/api/v1/workloads", json=job("c1", "team-a", duration=3600))
        team_a.post("/api/v1/workloads", json=job("c2", "team-a", duration=3600))
        wait_for(lambda: admitted(team_a, "c1"))
        assert team_a.get("/api/v1/workloads/c1").json()["nodes"] == [names[3]]
        explained = wait_for(lambda: team_a.get("/api/v1/workloads/c2/explain").json()["reason"])
        assert state_of(team_a, "c2") == "pending", explained

        assert admin.post(f"/api/v1/nodes/{names[3]}/drain").json()["cordoned"] is True
        wait_for(lambda: team_a.get("/api/v1/workloads/c1").json()["preemptions"] == 1)
        assert state_of(team_a, "c1") == "pending"
        events = admin.get("/api/v1/events", params={"limit": 1000}).json()["items"]
        drains = [e for e in events if e["kind"] == "preempt" and e["workload"] == "c1"]
        assert drains[-1]["details"]["reason"] == "node-drained"
        assert any(e["kind"] == "drain" and e["details"]["node"] == names[3] for e in events)
    finally:
        for name in names:
            admin.post(f"/api/v1/nodes/{name}/uncordon").raise_for_status()
    wait_for(lambda: admitted(team_a, "c1") and admitted(team_a, "c2"))
    wait_for(lambda: not any(_node(admin, n)["cordoned"] for n in names))


def test_the_server_fetches_no_address_a_team_chose(team_a: httpx.Client) -> None:
    """Server-side request forgery (issue 28, item 2): a team token once registered any
    http(s) URL as its Prometheus, which the server then fetched every poll, returning the
    error text to the team. Only the admin's servers (the config's prometheus_servers) are
    queried: a trigger names one, or gives the address of one."""
    foreign = _service("ssrf", "team-a")
    foreign["scaler"]["triggers"][0]["prometheus"] = {
        "server_address": "http://127.0.0.1:22/latest/meta-data",
        "query": "up",
    }
    response = team_a.post("/api/v1/services", json=foreign)
    assert response.status_code == 422, response.text
    (detail,) = response.json()["detail"]
    assert "only the Prometheus servers the admin lists may be queried" in detail["msg"]
    assert "listed: nothing" in detail["msg"]
    unknown = _service("ssrf", "team-a")
    unknown["scaler"]["triggers"][0]["prometheus"] = {"server": "elsewhere", "query": "up"}
    response = team_a.post("/api/v1/services", json=unknown)
    assert response.status_code == 422 and "'elsewhere' is not a Prometheus server" in response.text
    by_address = _service("by-address", "team-a")
    by_address["scaler"]["triggers"][0]["prometheus"] = {"server_address": NOTHING, "query": "up"}
    assert team_a.post("/api/v1/services", json=by_address).status_code == 201
    assert team_a.delete("/api/v1/services/by-address").status_code == 200


def test_metrics_time_requests_by_route_and_describe_the_process(admin: httpx.Client) -> None:
    """Issue 28 item 6: request latency and errors per route template (a made-up path adds
    no series), the hot path's submissions included, and the process and build."""
    before = admin.get("/metrics").text
    route = {"method": "GET", "route": "/api/v1/workloads/{name}"}
    n200 = sample_value(
        before, "fleetshare_http_request_duration_seconds_count", code="200", **route
    )
    n404 = sample_value(
        before, "fleetshare_http_request_duration_seconds_count", code="404", **route
    )
    name = admin.post("/api/v1/workloads", json=job("timed", "team-a")).json()["name"]
    assert admin.get(f"/api/v1/workloads/{name}").status_code == 200
    assert admin.get("/api/v1/workloads/no-such-workload").status_code == 404
    assert admin.get("/api/v1/made-up/path-1").status_code == 404
    text = admin.get("/metrics").text
    count = "fleetshare_http_request_duration_seconds_count"
    assert sample_value(text, count, code="200", **route) == n200 + 1
    assert sample_value(text, count, code="404", **route) == n404 + 1
    posted = {"method": "POST", "route": "/api/v1/workloads", "code": "201"}
    assert sample_value(text, count, **posted) >= 1
    assert sample_value(text, count, method="GET", route="unmatched", code="404") >= 1
    assert "made-up" not in text
    assert sample_value(text, "process_resident_memory_bytes") > 0
    assert sample_value(text, "fleetshare_build_info", version=fleetshare_version()) == 1


def fleetshare_version() -> str:
    from fleetshare import __version__

    return __version__
