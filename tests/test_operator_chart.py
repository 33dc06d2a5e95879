"""The Helm chart (deploy/helm/fleetshare): its CRDs, webhooks and RBAC rules are what the code
generates (they cannot drift; the workload kinds come from the kinds registry), its files parse,
and, where ``helm`` is installed, it renders with both certificate sources. That its RBAC
grants exactly what the operator uses is tested against a
real API server: tests/test_operator_autoscaling_api.py runs the operator bound to the
chart's rules only; that the API server accepts every object it renders:
tests/test_operator_chart_api.py."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetshare.manifests.kinds import SUSPENDED
from fleetshare.operator.chart import chart_files, cluster_rules
from fleetshare.operator.crds import crds
from fleetshare.operator.webhook import webhooks

CHART = Path(__file__).resolve().parent.parent / "deploy" / "helm" / "fleetshare"


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def test_chart_crds_are_what_crds_py_generates() -> None:
    """Regenerate: ``fleetshare operator crds > deploy/helm/fleetshare/crds/fleetshare.io.yaml``"""
    docs = [d for d in yaml.safe_load_all((CHART / "crds" / "fleetshare.io.yaml").read_text()) if d]
    assert docs == crds()


def test_chart_webhooks_are_those_the_operator_registers() -> None:
    chart = _load(CHART / "files" / "webhooks.yaml")
    code = [{k: v for k, v in hook.items() if k not in ("clientConfig", "failurePolicy")}
            for hook in webhooks({}, "Fail")]  # fmt: skip
    assert chart == code


def test_chart_files_are_what_the_code_generates() -> None:
    """Regenerate: ``fleetshare operator chart-files`` (the webhooks and the RBAC rules, whose
    workload kinds come from fleetshare.manifests.kinds)."""
    for name, text in chart_files().items():
        assert (CHART / name).read_text() == text, f"{name}: run fleetshare operator chart-files"
    rules = _load(CHART / "files" / "cluster-rules.yaml")
    assert rules == [rule.as_dict() for rule in cluster_rules()]
    granted = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    for kind in SUSPENDED.values():  # every kind admitted by suspension may be patched
        assert (kind.group, kind.plural) in granted, kind.kind
    from typer.testing import CliRunner

    from fleetshare.cli import app

    check = ["operator", "chart-files", "--check", "--chart", str(CHART)]
    result = CliRunner().invoke(app, check)
    assert result.exit_code == 0 and "up to date" in result.output, result.output


def test_chart_files_parse_and_rbac_is_least_privilege() -> None:
    chart = _load(CHART / "Chart.yaml")
    assert chart["name"] == "fleetshare" and chart["apiVersion"] == "v2"
    values = _load(CHART / "values.yaml")
    assert values["webhook"]["certificates"]["source"] in ("helm", "cert-manager")
    rules = _load(CHART / "files" / "cluster-rules.yaml")
    for rule in rules:
        assert set(rule) == {"apiGroups", "resources", "verbs"}
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
    granted = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    # no secrets, no CRD writes (Helm installs the CRDs), no webhook configuration writes
    assert not {r for _, r in granted} & {"secrets", "customresourcedefinitions",
                                         "mutatingwebhookconfigurations"}  # fmt: skip
    leases = _load(CHART / "files" / "lease-rules.yaml")
    assert leases == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                       "verbs": ["get", "create", "update"]}]  # fmt: skip


def _helm() -> str | None:
    found = shutil.which("helm")
    if found:
        return found
    cached = Path(os.environ.get("FLEETSHARE_HELM", "~/.cache/fleetshare/helm/bin/helm"))
    cached = cached.expanduser()
    return str(cached) if cached.is_file() else None


@pytest.mark.parametrize("source", ["helm", "cert-manager"])
def test_chart_renders(source: str) -> None:
    helm = _helm()
    if helm is None:
        pytest.skip("helm is not installed: the chart is only checked file by file")
    out = subprocess.run(
        [helm, "template", "fs", str(CHART), "--namespace", "fleetshare",
         "--kube-version", "1.33.0", "--set", f"webhook.certificates.source={source}",
         "--set", "namespaces={ml,research}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(out) if d]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
            "RoleBinding", "Service", "MutatingWebhookConfiguration"} <= set(by_kind)  # fmt: skip
    (role,) = by_kind["ClusterRole"]
    assert role["rules"] == _load(CHART / "files" / "cluster-rules.yaml")
    (deployment,) = by_kind["Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--no-install-crds" in args and "--namespace=ml" in args
    assert "--webhook-cert-dir=/etc/fleetshare/webhook" in args
    (config,) = by_kind["MutatingWebhookConfiguration"]
    clients = [h["clientConfig"] for h in config["webhooks"]]
    assert all(c["service"]["name"] == "fs-operator-webhook" for c in clients)
    if source == "helm":
        (secret,) = by_kind["Secret"]
        ca = secret["data"]["ca.crt"]
        assert all(c["caBundle"] == ca for c in clients)
        assert base64.b64decode(secret["data"]["tls.crt"]).startswith(b"-----BEGIN CERTIFICATE")
    else:
        assert "Secret" not in by_kind and "Certificate" in by_kind
        annotation = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        assert annotation == "fleetshare/fs-operator-webhook"
        assert all("caBundle" not in c for c in clients)
