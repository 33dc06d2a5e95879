"""The Helm chart's output, checked by a real kube-apiserver: the chart is rendered by helm
(``helm template``, for the server's version) with its default values and with the main
non-default ones, its CRDs (``crds/``) are applied for real, and every rendered object is
created in a server-side dry run (``dryRun=All``, ``fieldValidation=Strict``: unknown or
duplicate fields are refused too). Every object must be accepted; a failure names the object
and the API server's message.

cert-manager's Issuer and Certificate (``webhook.certificates.source=cert-manager``) are the
only objects not sent: their CRDs are cert-manager's, not installed here. Skipped without
helm (``make helm-bin``) or the kube binaries, as the other chart and API tests are."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetshare.operator.kube import CRDS, KubeError, Resource
from tests.kube_harness import wait_for
from tests.test_operator_chart import CHART, _helm

pytestmark = pytest.mark.slow

RELEASE, NAMESPACE = "chart-check", "fleetshare-chart"
CERT_MANAGER = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate")}

VALUES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "everything-set": {
        "image": {"repository": "registry.example/ml/fleetshare", "tag": "1.2.3",
                  "pullPolicy": "Always"},
        "replicas": 1,
        "namespaces": ["ml", "research"],
        "cloud": "simulated",
        "registrationTimeoutSeconds": 300,
        "staleSeconds": 30,
        "nodeSelector": {"workload": "system"},
        "tolerations": [{"key": "system", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 10001, "fsGroup": 10001,
                               "seccompProfile": {"type": "RuntimeDefault"}},
        "metrics": {"port": 9090, "service": {"type": "NodePort", "port": 9090},
                    "annotations": {}},
        "webhook": {"port": 10443, "failurePolicy": "Ignore",
                    "certificates": {"source": "helm", "validityDays": 30}},
    },
    "cert-manager": {"webhook": {"certificates": {"source": "cert-manager"}}},
    "no-webhook": {"webhook": {"enabled": False}},
}  # fmt: skip


def render(helm: str, values: dict[str, Any], kube_version: str, tmp: Path) -> list[Any]:
    path = tmp / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    out = subprocess.run(
        [helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--values", str(path),
         "--kube-version", kube_version],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [d for d in yaml.safe_load_all(out) if d]


def apply_chart_crds(kube: Any) -> None:
    """The chart's ``crds/`` for real (server-side apply), served before anything is sent."""
    for path in sorted((CHART / "crds").glob("*.yaml")):
        for crd in (d for d in yaml.safe_load_all(path.read_text()) if d):
            name = crd["metadata"]["name"]
            kube.request(
                "PATCH", CRDS.path(None, name), body=json.dumps(crd),
                content_type="application/apply-patch+yaml",
                query={"fieldManager": "chart-test", "force": "true"},
            )  # fmt: skip
            wait_for(f"CRD {name} established", lambda n=name: _established(kube, n), 30)


def _established(kube: Any, name: str) -> bool:
    conditions = (kube.get(CRDS, name).get("status") or {}).get("conditions") or ()
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def served(kube: Any, api_version: str) -> dict[str, tuple[str, bool]]:
    """The kinds an API group version serves: kind -> (plural, namespaced)."""
    path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    try:
        resources = kube.request("GET", path)["resources"]
    except KubeError:
        return {}
    return {r["kind"]: (r["name"], r["namespaced"]) for r in resources if "/" not in r["name"]}


@pytest.mark.parametrize("case", list(VALUES))
def test_every_rendered_object_is_accepted_by_a_real_api_server(
    kube: Any, case: str, tmp_path: Path
) -> None:
    helm = _helm()
    if helm is None:
        pytest.skip("helm is not installed (make helm-bin)")
    api = kube.kube
    version = api.request("GET", "/version")["gitVersion"].lstrip("v")
    docs = render(helm, VALUES[case], version, tmp_path)
    apply_chart_crds(api)
    kube.ensure_namespace(NAMESPACE)
    refused, sent = [], set()
    for doc in docs:
        key, name = (doc["apiVersion"], doc["kind"]), f"{doc['kind']} {doc['metadata']['name']}"
        if key in CERT_MANAGER:
            continue
        kinds = served(api, doc["apiVersion"])
        if doc["kind"] not in kinds:
            refused.append(f"{name}: the API server serves no {doc['kind']} in {doc['apiVersion']}")
            continue
        plural, namespaced = kinds[doc["kind"]]
        res = Resource(doc["kind"], doc["apiVersion"], plural, namespaced)
        try:
            api.request("POST", res.path(NAMESPACE if namespaced else None),
                        query={"dryRun": "All", "fieldValidation": "Strict"}, body=doc)  # fmt: skip
        except KubeError as exc:
            refused.append(f"{name}: {exc}")
        sent.add(doc["kind"])
    assert not refused, "\n".join(refused)
    expected = {"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
                "RoleBinding", "Service"}  # fmt: skip
    if case != "no-webhook":
        expected.add("MutatingWebhookConfiguration")
    if case in ("defaults", "everything-set"):
        expected.add("Secret")
    assert sent == expected
    if case == "cert-manager":
        assert {(d["apiVersion"], d["kind"]) for d in docs} >= CERT_MANAGER
