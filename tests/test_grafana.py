"""deploy/grafana/fleetshare.json: valid JSON whose queries name only metrics (and labels) the
service exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fleetshare.service.config import load_config
from fleetshare.service.metrics import ServiceMetrics
from fleetshare.service.plane import ControlPlane
from fleetshare.service.store import Store

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
