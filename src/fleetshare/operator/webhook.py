"""The mutating admission webhook: every governed pod is created behind the
``fleetshare.io/admission`` scheduling gate, every governed Job (JobSet, Kubeflow job, ...)
suspended (Kueue's way), so nothing governed starts before the operator admits it; a governed
Deployment, StatefulSet or LeaderWorkerSet gets its pod templates marked so that its pods are
queued (as Kueue's webhooks do: :meth:`~fleetshare.manifests.kinds.PodGroupKind.template_ops`),
and a LeaderWorkerSet's pods their group (:meth:`~fleetshare.manifests.kinds.PodGroupKind.pod_ops`).
The kinds and the rules come from the registry (:mod:`fleetshare.manifests.kinds`).

A governed object names a queue or a team (``kueue.x-k8s.io/queue-name`` or
``fleetshare.io/team``); a Job's own pods are not gated (the Job is the workload). Two
webhooks (one per label, an object selector cannot say "either") send only those objects
here. :meth:`Webhook.register` writes the MutatingWebhookConfiguration with a URL client
config (an operator outside the cluster, on loopback in the tests) and the CA of a
self-signed certificate made with ``openssl``. In a cluster (``cert_dir``) it serves the
certificate of a mounted Secret and the Helm chart writes the configuration, pointing at a
Service (``deploy/helm/fleetshare``).

The operator does not need the webhook to be correct: without it, a governed Job created
unsuspended is suspended when first seen and a pod created without the gate is replaced by a
gated copy (:mod:`.cluster`), but things may start meanwhile.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from fleetshare.manifests import QUEUE_LABEL, TEAM_LABEL
from fleetshare.manifests.kinds import KINDS, POD_GROUPS, SUSPENDED
from fleetshare.operator.kube import Kube, KubeError, Resource
from fleetshare.operator.objects import GATE, governed, owned

log = logging.getLogger("fleetshare.operator")
CONFIGS = Resource(
    "MutatingWebhookConfiguration", "admissionregistration.k8s.io/v1",
    "mutatingwebhookconfigurations", False,
)  # fmt: skip
NAME = "fleetshare-operator"


def mutation(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch for a created object (empty: leave it alone)."""
    if not governed(obj) or owned(obj):
        return []
    name = str(obj.get("kind"))
    suspended = SUSPENDED.get(name)
    if suspended is not None:
        return [] if suspended.suspended(obj) else suspended.suspend_ops(obj, True)
    group = POD_GROUPS.get(name)
    if group is not None:
        return group.template_ops(obj)
    if name != "Pod":
        return []
    ops = [op for kind in POD_GROUPS.values() for op in kind.pod_ops(obj)]
    gates = (obj.get("spec") or {}).get("schedulingGates")
    if gates and any(g.get("name") == GATE for g in gates):
        return ops
    if gates:
        return [*ops, {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": GATE}}]
    return [*ops, {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]}]


def review(body: dict[str, Any]) -> dict[str, Any]:
    """An AdmissionReview answered."""
    request = body.get("request") or {}
    obj = request.get("object") or {}
    obj.setdefault("kind", (request.get("kind") or {}).get("kind"))
    response: dict[str, Any] = {"uid": request.get("uid"), "allowed": True}
    patch = mutation(obj) if request.get("operation") == "CREATE" else []
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": response}  # fmt: skip


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(min(length, 8 << 20)))
            out = json.dumps(review(body)).encode()
            self.send_response(200)
        except (ValueError, AttributeError) as exc:
            out = json.dumps({"error": str(exc)}).encode()
            self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("webhook: " + format, *args)


def self_signed(directory: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """A certificate (and key) for ``host`` made with openssl."""
    cert, key = directory / "webhook.crt", directory / "webhook.key"
    san = f"IP:{host}" if host.replace(".", "").isdigit() else f"DNS:{host}"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "365",
         "-subj", f"/CN={host}", "-addext", f"subjectAltName={san}",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def rules() -> list[dict[str, Any]]:
    """The objects the webhook is sent at creation, by API group and version: pods, the kinds
    admitted by suspension and those whose pod templates it marks (:data:`KINDS`; matching a
    kind whose CRD is not installed is harmless)."""
    resources: dict[tuple[str, str], list[str]] = {}
    for kind in KINDS.values():
        if kind.admission in ("suspend", "gate", "pods"):
            resources.setdefault((kind.group, kind.version), []).append(kind.plural)
    return [
        {"operations": ["CREATE"], "apiGroups": [group], "apiVersions": [version],
         "resources": plurals}
        for (group, version), plurals in sorted(resources.items())
    ]  # fmt: skip


def webhooks(client_config: dict[str, Any], failure_policy: str) -> list[dict[str, Any]]:
    """The configuration's webhooks: one per label that makes an object governed (the Helm
    chart's ``files/webhooks.yaml`` holds the same, without client config)."""
    hooks = []
    for label, short in ((QUEUE_LABEL, "queue"), (TEAM_LABEL, "team")):
        hooks.append({
            "name": f"{short}.gate.fleetshare.io",
            "clientConfig": client_config,
            "rules": rules(),
            "objectSelector": {"matchExpressions": [{"key": label, "operator": "Exists"}]},
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": failure_policy,
            "timeoutSeconds": 5,
        })  # fmt: skip
    return hooks


class Webhook:
    """The webhook server on ``host:port`` (0: any free port) and its registration."""

    def __init__(self, kube: Kube, host: str = "127.0.0.1", port: int = 0,
                 failure_policy: str = "Fail", cert_dir: Path | None = None) -> None:  # fmt: skip
        self.kube = kube
        self.host = host
        self.failure_policy = failure_policy
        self._dir = tempfile.TemporaryDirectory(prefix="fleetshare-webhook-")
        if cert_dir is not None:  # a Secret mounted in the pod (the Helm chart makes it)
            self.cert, key = cert_dir / "tls.crt", cert_dir / "tls.key"
        else:
            self.cert, key = self_signed(Path(self._dir.name), host)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, key)
        self.server = ThreadingHTTPServer((host, port), _Handler)
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                        name="webhook")  # fmt: skip

    def start(self) -> None:
        self._thread.start()

    def stop(self, unregister: bool = True) -> None:
        if unregister:
            try:
                self.kube.delete(CONFIGS, NAME)
            except KubeError as exc:
                log.debug("webhook configuration not deleted: %s", exc)
        self.server.shutdown()
        self.server.server_close()
        self._dir.cleanup()

    def configuration(self) -> dict[str, Any]:
        ca = base64.b64encode(self.cert.read_bytes()).decode()
        client = {"url": f"https://{self.host}:{self.port}/mutate", "caBundle": ca}
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": NAME},
            "webhooks": webhooks(client, self.failure_policy),
        }

    def register(self) -> None:
        """Create or replace the MutatingWebhookConfiguration."""
        body = self.configuration()
        try:
            current = self.kube.get(CONFIGS, NAME)
        except KubeError as exc:
            if exc.status != 404:
                raise
            self.kube.create(CONFIGS, body)
            return
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        self.kube.replace(CONFIGS, NAME, body)
