"""deploy/grafana/fleetshare.json: valid JSON whose queries name only metrics (and labels) the
service exports: in process, and on a real two-process server's /metrics; and a real
Prometheus scraping a real server draws the history panels (issue 28 item 6)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetshare.service.auth import create_token
from fleetshare.service.config import load_config
from fleetshare.service.metrics import ServiceMetrics
from fleetshare.service.plane import ControlPlane
from fleetshare.service.store import Store
from tests import prometheus_server
from tests.service_helpers import Server, job, start_server, wait_for

DASHBOARD = Path(__file__).parent.parent / "deploy" / "grafana" / "fleetshare.json"
SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_info")


def test_the_grafana_dashboard_queries_exported_metrics(tmp_path: Path) -> None:
    plane = ControlPlane(load_config(None), Store(f"sqlite:///{tmp_path / 'db'}"))
    metrics = ServiceMetrics(plane)
    exported: dict[str, set[str]] = {}
    for family in metrics.registry.collect():
        labels = {label for sample in family.samples for label in sample.labels}
        exported[family.name] = labels
    # labelled families without samples yet: their label names from the collectors
    exported["fleetshare_admitted_workloads"] |= {"cluster_queue"}
    exported["fleetshare_admission_wait_time_seconds"] |= {"cluster_queue", "le"}
    exported["fleetshare_preempted_workloads"] |= {"preempting_cluster_queue", "reason"}
    exported["fleetshare_evicted_workloads"] |= {"cluster_queue", "reason"}
    exported["fleetshare_loop_reconcile_duration_seconds"] |= {"le"}
    exported["fleetshare_http_request_duration_seconds"] |= {"method", "route", "code", "le"}
    exported["fleetshare_store_errors"] |= {"operation", "error"}
    limits = {"cohort", "cluster_queue", "flavor", "resource"}
    exported["fleetshare_cluster_queue_borrowing_limit"] |= limits
    exported["fleetshare_cluster_queue_lending_limit"] |= limits
    plane.store.close()

    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "fleetshare"
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    assert len(exprs) > 20
    used = set()
    for expr in exprs:
        for name in re.findall(r"fleetshare_[a-z_]+", expr):
            base = name
            for suffix in SUFFIXES:
                if base.endswith(suffix) and base.removesuffix(suffix) in exported:
                    base = base.removesuffix(suffix)
            assert base in exported, f"{name} in {expr!r} is not exported"
            used.add(base)
        for selector in re.findall(r"(fleetshare_[a-z_]+)\{([^}]*)\}", expr):
            base = selector[0]
            for suffix in SUFFIXES:
                if base.endswith(suffix) and base.removesuffix(suffix) in exported:
                    base = base.removesuffix(suffix)
            for label in re.findall(r"([a-z_]+)\s*=~?", selector[1]):
                assert label in exported[base], f"{label} not a label of {base}"
    ours = {name for name in exported if name.startswith("fleetshare_")}  # not process_*
    assert used == ours, ours - used


# -- against a real server, and a real Prometheus drawing its history ---------------------------

HISTORY_PANELS = {
    "Pending by reason": {(("reason", "quota"),): 1.0},
    "Usage vs quota": {(("cluster_queue", "team-a"), ("resource", "nvidia.com/gpu")): 3.0},
    "Borrowed beyond quota": {(("cluster_queue", "team-a"), ("resource", "nvidia.com/gpu")): 1.0},
}
"""History panels and a series each must draw, computed by hand for the workloads below: on
the default config (team-a: quota 2 GPUs, may borrow 1), w0-w2 run (3 GPUs, 1 borrowed) and w3
waits for quota."""
ONLY_ON_FAILURE = {"fleetshare_store_errors"}
"""Families that have samples only once something failed."""


def _panels() -> dict[str, dict[str, Any]]:
    return {p["title"]: p for p in json.loads(DASHBOARD.read_text())["panels"]}


def _as_grafana_would(expr: str) -> str:
    """A panel's query with the variables set to All (their allValue)."""
    return expr.replace("$team", ".*").replace("$resource", ".*")


def _sampled(text: str) -> set[str]:
    """The metric families with samples in a /metrics text."""
    return {f.name for f in text_string_to_metric_families(text) if f.samples}


@pytest.fixture(scope="module")
def busy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """A real ``fleetshare serve`` (API and loop process) on SQLite where team-a borrows and a
    workload waits for quota (see :data:`HISTORY_PANELS`); its admin token."""
    tmp = tmp_path_factory.mktemp("grafana")
    db = f"sqlite:///{tmp / 'fs.db'}"
    store = Store(db)
    store.create()
    admin = create_token(store, "admin")[1]
    store.close()
    server = start_server(db, tmp)
    try:
        with server.client(admin) as client:
            for i in range(4):
                assert client.post("/api/v1/workloads", json=job(f"w{i}", "team-a")).is_success
            wait_for(
                lambda: client.get("/api/v1/workloads/w3/explain").json()["category"] == "quota",
                timeout=30,
            )
            # the loop process's admissions reach /metrics with its next report, not at once
            wait_for(
                lambda: (
                    "fleetshare_admission_wait_time_seconds"
                    in _sampled(client.get("/metrics").text)
                ),
                timeout=30,
            )
        yield server, admin
    finally:
        server.stop()


@pytest.mark.slow
def test_the_dashboards_families_are_on_a_real_servers_metrics(
    busy_server: tuple[Server, str],
) -> None:
    """Every family a panel names is on a real two-process server's /metrics (the loop
    process's merged with the API process's), and every family the history, store and lease
    panels name has samples there, with the labels the queries select on."""
    server, admin = busy_server
    with server.client(admin) as client:
        text = client.get("/metrics").text
    labels: dict[str, set[str]] = {}
    sampled: set[str] = set()
    for family in text_string_to_metric_families(text):
        labels[family.name] = {k for s in family.samples for k in s.labels}
        if family.samples:
            sampled.add(family.name)
    new = {"Pending reasons and waits over time", "Store and lease"}
    in_new_rows = False
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        if panel["type"] == "row":
            in_new_rows = panel["title"] in new
            continue
        for target in panel["targets"]:
            for name in re.findall(r"fleetshare_[a-z_]+", target["expr"]):
                base = _base(name, labels)
                assert base in labels, f"{name} ({panel['title']}) is not on a real /metrics"
                if in_new_rows and base not in ONLY_ON_FAILURE:
                    assert base in sampled, f"{base} ({panel['title']}) has no samples"
            for name, selector in re.findall(r"(fleetshare_[a-z_]+)\{([^}]*)\}", target["expr"]):
                base = _base(name, labels)
                if base in sampled:
                    for label in re.findall(r"([a-z_]+)\s*=~?", selector):
                        assert label in labels[base], f"{label} not a label of {base}"


def _base(name: str, families: dict[str, set[str]]) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix) and name.removesuffix(suffix) in families:
            return name.removesuffix(suffix)
    return name


@pytest.mark.slow
def test_prometheus_draws_the_history_panels_from_a_real_server(
    busy_server: tuple[Server, str], tmp_path: Path
) -> None:
    """A real Prometheus scrapes the real server every second (with its token); each history
    panel's query, as Grafana sends it (a range query, the variables at All), returns the
    series computed by hand, at every step once they exist."""
    if prometheus_server.binary() is None:
        pytest.skip(prometheus_server.SKIPPED)
    server, admin = busy_server
    target = prometheus_server.Target("fleetshare", server.url.removeprefix("http://"), admin)
    with prometheus_server.running(tmp_path, [target]) as (address, _):

        def query(expr: str, **params: Any) -> list[dict[str, Any]]:
            path = "query_range" if "start" in params else "query"
            body = httpx.get(f"{address}/api/v1/{path}", params={"query": expr, **params}).json()
            assert body["status"] == "success", body
            return list(body["data"]["result"])

        scrapes = 'count_over_time(fleetshare_lease_held{job="fleetshare"}[1m])'
        wait_for(lambda: (r := query(scrapes)) and float(r[0]["value"][1]) >= 5, timeout=60)
        end = time.time()
        for title, expected in HISTORY_PANELS.items():
            expr = _as_grafana_would(_panels()[title]["targets"][0]["expr"])
            result = query(expr, start=end - 4, end=end, step=1)
            drawn = {tuple(sorted(r["metric"].items())): r["values"] for r in result}
            for series, value in expected.items():
                assert series in drawn, (title, series, list(drawn))
                points = drawn[series]
                assert len(points) == 5, (title, points)  # every step of the range
                assert {float(v) for _, v in points} == {value}, (title, points)
