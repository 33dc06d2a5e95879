"""The CLI: tokens on the store, and the client commands against a real server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetshare.cli import app
from tests.service_helpers import Server, cli_env, config_file_listing, start_server, wait_for

runner = CliRunner(env={"COLUMNS": "200"})


def fleetshare(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleetshare.cli", *args],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    workdir = tmp_path_factory.mktemp("cli")
    config = config_file_listing(workdir, {"nothing": "http://127.0.0.1:9"})
    srv = start_server(f"sqlite:///{workdir / 'fleetshare.db'}", workdir, config)
    yield srv
    srv.stop()


def token(server: Server, scope: str) -> str:
    result = runner.invoke(app, ["token", "create", "--scope", scope, "--db", server.db])
    assert result.exit_code == 0, result.output
    return result.stdout.strip().splitlines()[-1]


def test_tokens_are_created_listed_and_revoked(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tokens.db'}"
    created = fleetshare("token", "create", "--scope", "team:ml", "--name", "ml ci", "--db", db)
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    assert secret.startswith("fs_") and "token 1 (team:ml)" in created.stderr

    def rows() -> list[dict[str, object]]:
        listed = runner.invoke(app, ["token", "list", "--db", db, "--json"])
        assert secret not in listed.stdout
        out: list[dict[str, object]] = json.loads(listed.stdout)
        return out

    assert [(r["id"], r["scope"], r["name"], r["revoked_at"]) for r in rows()] == [
        (1, "team:ml", "ml ci", None)
    ]
    assert runner.invoke(app, ["token", "revoke", "1", "--db", db]).exit_code == 0
    assert rows()[0]["revoked_at"]
    again = runner.invoke(app, ["token", "revoke", "1", "--db", db])
    assert again.exit_code == 1 and again.stderr.strip() == "error: no active token 1"
    bad = runner.invoke(app, ["token", "create", "--scope", "root", "--db", db])
    assert bad.exit_code == 2 and "admin, viewer or team:NAME" in bad.stderr


def test_serve_refuses_a_config_with_workloads_once_as_bad_input(tmp_path: Path) -> None:
    """A scenario with workloads as ``serve --config`` is bad input: exit 2 and one message
    (not one from the loop process and another from the API's, exit 1)."""
    config = tmp_path / "config.yaml"
    config.write_text(
        "cluster:\n  nodes: [{instance_type: ml.g5.8xlarge, count: 1}]\n"
        "policy:\n  teams: [{name: t, quota: [{instance_type: ml.g5.8xlarge, count: 1}]}]\n"
        "workloads:\n  - {name: w, team: t, requests: {cpu: 1}}\n"
    )
    db = f"sqlite:///{tmp_path / 'fleetshare.db'}"
    result = fleetshare("serve", "--config", str(config), "--db", db, "--port", "0")
    assert result.returncode == 2, result.stderr
    text = " ".join(result.stderr.split())  # as one line, however the terminal wraps it
    assert text.count("submit workloads through the API") == 1, result.stderr
    assert "ScenarioError" not in text


def test_client_commands(server: Server, tmp_path: Path) -> None:
    admin = token(server, "admin")
    team_a = token(server, "team:team-a")
    common = ["--server", server.url]
    spec = tmp_path / "jobs.yaml"
    spec.write_text(
        "workloads:\n"
        "  - {name: cli-1, team: team-a, pods: 1, requests: {nvidia.com/gpu: 1}}\n"
        "  - {name: cli-2, team: team-a, pods: 3, requests: {nvidia.com/gpu: 1}}\n"
    )
    result = runner.invoke(app, ["job", "submit", str(spec), *common, "--token", team_a])
    assert result.exit_code == 0, result.output
    assert "submitted cli-1" in result.stdout and "submitted cli-2" in result.stdout

    def listed() -> list[dict[str, str]]:
        out = runner.invoke(app, ["job", "list", *common, "--token", team_a, "--json"])
        items: list[dict[str, str]] = json.loads(out.stdout)
        return items

    wait_for(lambda: any(w["state"] == "admitted" for w in listed()))
    explained = runner.invoke(
        app, ["job", "explain", "cli-2", *common, "--token", team_a, "--json"]
    )
    assert json.loads(explained.stdout)["state"] == "pending"
    table = runner.invoke(app, ["job", "list", *common], env={"FLEETSHARE_TOKEN": team_a})
    assert "cli-1" in table.stdout and "admitted" in table.stdout
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", table.stdout)  # times carry their zone
    quotas = runner.invoke(app, ["team", "list", *common, "--token", admin])
    assert re.search(r"memory=[0-9.]+Gi", quotas.stdout) and "e+" not in quotas.stdout, (
        quotas.stdout
    )
    teams = runner.invoke(app, ["team", "list", *common, "--token", admin, "--json"])
    assert [t["name"] for t in json.loads(teams.stdout)] == ["team-a", "team-b"]
    show = runner.invoke(app, ["team", "show", "team-a", *common, "--token", team_a])
    assert "ml.g5.8xlarge" in show.stdout
    nodes = runner.invoke(app, ["nodes", *common, "--token", admin])
    assert "g5.8xlarge-0" in nodes.stdout
    events = runner.invoke(app, ["events", *common, "--token", admin, "--json"])
    kinds = [json.loads(line)["kind"] for line in events.stdout.splitlines()]
    assert "submit" in kinds and "admit" in kinds
    cancel = runner.invoke(app, ["job", "cancel", "cli-1", *common, "--token", team_a])
    assert cancel.exit_code == 0 and "cancelled cli-1" in cancel.stdout


def test_teams_are_added_changed_and_removed_one_at_a_time(server: Server, tmp_path: Path) -> None:
    """Issue 28 item 7: ``fleetshare team set/remove`` instead of GET, edit and PUT of the
    whole policy; each change is a new policy version, bad fields are one line naming them,
    and only an admin may change teams."""
    admin = token(server, "admin")
    team_a = token(server, "team:team-a")
    common = ["--server", server.url, "--token", admin]
    spec = tmp_path / "team.yaml"
    spec.write_text("quota: [{instance_type: ml.g5.8xlarge, count: 1}]\nfair_share_weight: 2\n")

    def names() -> list[str]:
        out = runner.invoke(app, ["team", "list", *common, "--json"])
        return [t["name"] for t in json.loads(out.stdout)]

    added = runner.invoke(app, ["team", "set", "team-c", "-f", str(spec), *common])
    assert added.exit_code == 0, added.output
    assert re.fullmatch(r"team team-c added: policy version \d+", added.stdout.strip())
    wait_for(lambda: "team-c" in names())
    spec.write_text("quota: [{instance_type: ml.g5.8xlarge, count: 2}]\n")
    replaced = runner.invoke(app, ["team", "set", "team-c", "-f", str(spec), *common])
    assert "team team-c replaced" in replaced.stdout, replaced.output
    spec.write_text("quota: [{instance_type: ml.g5.8xlarge, count: -1}]\n")
    bad = runner.invoke(app, ["team", "set", "team-c", "-f", str(spec), *common])
    assert bad.exit_code == 1 and len(bad.stderr.strip().splitlines()) == 1, bad.output
    assert "count" in bad.stderr and "422" in bad.stderr
    other = runner.invoke(app, ["team", "set", "team-d", "-f", str(spec), "--server",
                                server.url, "--token", team_a])  # fmt: skip
    assert other.exit_code == 1 and "403" in other.stderr
    removed = runner.invoke(app, ["team", "remove", "team-c", *common])
    assert removed.exit_code == 0 and "team team-c removed" in removed.stdout, removed.output
    wait_for(lambda: "team-c" not in names())
    assert names() == ["team-a", "team-b"]
    again = runner.invoke(app, ["team", "remove", "team-c", *common])
    assert again.exit_code == 1 and again.stderr.strip() == "error: 404: no team 'team-c'"


def test_client_errors_are_one_line(server: Server) -> None:
    team_a = token(server, "team:team-a")
    result = runner.invoke(
        app, ["job", "cancel", "nope", "--server", server.url, "--token", team_a]
    )
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: 404: no workload 'nope'"
    result = runner.invoke(app, ["team", "list", "--server", server.url])
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: 401: missing or invalid bearer token"
    result = runner.invoke(app, ["nodes", "--server", "http://127.0.0.1:9", "--token", team_a])
    assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1


def test_node_pools_and_node_operations(server: Server, tmp_path: Path) -> None:
    admin = token(server, "admin")
    team_a = token(server, "team:team-a")
    common = ["--server", server.url]
    pools = tmp_path / "pools.yaml"
    pools.write_text(
        "pools:\n  - {name: spare, instance_types: [ml.g5.8xlarge], limits: {nodes: 3}}\n"
    )
    refused = runner.invoke(app, ["nodepools", "apply", str(pools), *common, "--token", team_a])
    assert refused.exit_code == 1 and "403" in refused.stderr
    applied = runner.invoke(app, ["nodepools", "apply", str(pools), *common, "--token", admin])
    assert applied.exit_code == 0, applied.output
    assert "spare" in applied.stdout and "nodes=3" in applied.stdout
    listed = runner.invoke(app, ["nodepools", "list", *common, "--token", team_a, "--json"])
    out = json.loads(listed.stdout)
    assert out["source"] == "api" and [p["name"] for p in out["pools"]] == ["spare"]
    typo = tmp_path / "typo.yaml"
    typo.write_text("- {name: spare, instance_types: [ml.g5.8xlarg]}\n")
    bad = runner.invoke(app, ["nodepools", "apply", str(typo), *common, "--token", admin])
    assert bad.exit_code == 1
    assert bad.stderr.strip().startswith("error: 422: pools.0.instance_types[0]: unknown")

    cordon = ["nodes", "cordon", "g5.8xlarge-1", *common, "--token", admin, "--json"]
    assert json.loads(runner.invoke(app, cordon).stdout)["cordoned"] is True

    def row() -> str:
        table = runner.invoke(app, ["nodes", *common, "--token", team_a]).stdout
        return next(line for line in table.splitlines() if "g5.8xlarge-1" in line)

    wait_for(lambda: "cordoned" in row())
    uncordon = runner.invoke(app, ["nodes", "uncordon", "g5.8xlarge-1", *common, "--token", admin])
    assert uncordon.exit_code == 0 and "uncordon g5.8xlarge-1" in uncordon.stdout
    wait_for(lambda: "cordoned" not in row())
    empty = tmp_path / "none.yaml"
    empty.write_text("pools: []\n")
    cleared = runner.invoke(app, ["nodepools", "apply", str(empty), *common, "--token", admin])
    assert cleared.exit_code == 0, cleared.output


KEDA = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: chat}
spec:
  template:
    spec:
      nodeSelector: {zone: a}
      containers:
        - name: server
          resources: {requests: {cpu: 500m, memory: 2Gi}}
---
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: chat-keda}
spec:
  scaleTargetRef: {name: chat}
  maxReplicaCount: 4
  triggers:
    - type: prometheus
      metadata:
        serverAddress: "http://127.0.0.1:9"
        query: "sum(rate(requests_total[1m]))"
        threshold: "7"
"""

HPA = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: chat}
spec:
  template:
    spec:
      containers: [{name: server, resources: {requests: {cpu: "1"}}}]
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: chat-hpa
  labels: {fleetshare.io/team: team-b}
  annotations:
    fleetshare.io/metric.inflight: concurrency
    fleetshare.io/prometheus: "http://127.0.0.1:9"
    fleetshare.io/query.inflight: "sum(inflight)"
spec:
  scaleTargetRef: {name: chat}
  maxReplicas: 5
  metrics:
    - type: Pods
      pods: {metric: {name: inflight}, target: {type: AverageValue, averageValue: "16"}}
"""


def test_service_commands(server: Server, tmp_path: Path) -> None:
    team_a = ["--server", server.url, "--token", token(server, "team:team-a")]
    admin = ["--server", server.url, "--token", token(server, "admin")]
    native = tmp_path / "native.yaml"
    native.write_text(
        "name: native\nteam: team-a\nreplica: {requests: {cpu: 1}}\n"
        "scaler:\n  triggers:\n    - metric: rps\n      target: 5\n"
        "      prometheus: {server_address: 'http://127.0.0.1:9', query: up}\n"
    )
    result = runner.invoke(app, ["service", "apply", str(native), *team_a])
    assert result.exit_code == 0, result.output
    assert "registered service native (team team-a)" in result.stdout
    # applied again with other rules: changed in place, as kubectl apply does
    native.write_text(native.read_text().replace("target: 5", "target: 8"))
    again = runner.invoke(app, ["service", "apply", str(native), *team_a, "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["spec"]["scaler"]["triggers"][0]["target"] == 8
    again = runner.invoke(app, ["service", "apply", str(native), *team_a])
    assert "updated service native (team team-a)" in again.stdout

    keda = tmp_path / "keda.yaml"
    keda.write_text(KEDA)  # no team label: the team token's team
    result = runner.invoke(app, ["service", "apply", str(keda), *team_a, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["name"], out["team"]) == ("chat-keda", "team-a")
    assert out["spec"]["replica"] == {
        "requests": {"cpu": "500m", "memory": "2Gi"},
        "node_selector": {"zone": "a"},
    }
    assert out["spec"]["scaler"]["max_replicas"] == 4
    assert (
        out["spec"]["scaler"]["triggers"][0]["prometheus"]["query"]
        == "sum(rate(requests_total[1m]))"
    )

    hpa = tmp_path / "hpa.yaml"
    hpa.write_text(HPA)  # labelled team-b: a team-a token may not
    refused = runner.invoke(app, ["service", "apply", str(hpa), *team_a])
    assert refused.exit_code == 1 and "403" in refused.stderr
    result = runner.invoke(app, ["service", "apply", str(hpa), *admin])
    assert result.exit_code == 0, result.output
    assert "registered service chat-hpa (team team-b)" in result.stdout

    listed = runner.invoke(app, ["service", "list", *team_a])
    assert listed.exit_code == 0 and "native" in listed.stdout and "chat-keda" in listed.stdout
    assert "chat-hpa" not in listed.stdout
    names = json.loads(runner.invoke(app, ["service", "list", *admin, "--json"]).stdout)
    assert [s["name"] for s in names] == ["native", "chat-keda", "chat-hpa"]
    shown = runner.invoke(app, ["service", "show", "chat-hpa", *admin])
    assert shown.exit_code == 0 and "sum(inflight)" in shown.stdout and "team-b" in shown.stdout
    missing = runner.invoke(app, ["service", "show", "chat-hpa", *team_a])
    assert missing.exit_code == 1 and missing.stderr.strip() == "error: 404: no service 'chat-hpa'"

    cron = tmp_path / "cron.yaml"
    cron.write_text(
        KEDA + "    - type: cron\n      metadata: {timezone: UTC, start: '0 9 * * *', "
        "end: '0 17 * * *', desiredReplicas: '2'}\n"
    )
    bad = runner.invoke(app, ["service", "apply", str(cron), *team_a])
    assert bad.exit_code == 2 and "cron triggers are not followed" in bad.stderr

    for name, who in (("native", team_a), ("chat-keda", team_a), ("chat-hpa", admin)):
        deleted = runner.invoke(app, ["service", "delete", name, *who])
        assert deleted.exit_code == 0 and f"deleted service {name}" in deleted.stdout
    assert json.loads(runner.invoke(app, ["service", "list", *admin, "--json"]).stdout) == []
