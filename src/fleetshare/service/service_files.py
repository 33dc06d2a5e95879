"""A service file as ``POST /api/v1/services`` wants it (``fleetshare service apply FILE``,
read on the client): fleetshare's native service spec (``name``, ``team``, ``replica``,
``scaler``...), or a Deployment with the KEDA ScaledObject or autoscaling/v2 HPA that scales
it, imported as the simulator imports them (:mod:`fleetshare.inference.manifests`).

From a manifest: the service is named after the scaler object, its replica is the
Deployment's pod (requests, node selector; ``priorityClassName`` its priority), its scaler the
object's; its team is ``team`` when given, else the ``fleetshare.io/team`` label of the
scaler object or of the Deployment, else the team of a team token. An HPA names no
Prometheus query (its metrics come through an adapter): annotate it with the server,
``fleetshare.io/prometheus: http://prometheus:9090``, and each metric's query,
``fleetshare.io/query.<metric name>: sum(...)``. What the live service
cannot follow is refused (cron triggers, tolerations and affinity of the pod: it would scale
or place otherwise than asked); every trigger needs a Prometheus query, which the server
checks.
"""

from __future__ import annotations

from typing import Any

from fleetshare.inference.manifests import import_scalers
from fleetshare.manifests import TEAM_LABEL, Document, documents
from fleetshare.manifests.values import ManifestError
from fleetshare.model.quantity import format_quantity

MANIFEST_KINDS = ("Deployment", "ScaledObject", "HorizontalPodAutoscaler")
SERVER_ANNOTATION = "fleetshare.io/prometheus"
QUERY_ANNOTATION = "fleetshare.io/query."
"""On an HPA: the Prometheus server, and per metric name the query that reads it."""


def is_scaler_manifest(docs: list[Document]) -> bool:
    """True when the documents are Kubernetes objects (a ``kind`` each), not a native spec."""
    return any(isinstance(d.data, dict) and "kind" in d.data for d in docs)


def service_body(
    text: str, where: str, team: str | None = None, default_team: str | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The request body for the service in ``text`` (YAML or JSON) and notes on what a
    manifest held that is not modelled; ``team`` overrides the file's, ``default_team`` is
    a manifest's when it names none. Raises ``ManifestError`` or ``InputError`` naming the
    file and field."""
    docs = [d for d in documents(text, where) if d.data is not None]
    if not docs:
        raise ManifestError(where, "no service in the file")
    if not is_scaler_manifest(docs):
        if len(docs) != 1 or not isinstance(docs[0].data, dict):
            raise ManifestError(where, "a native service spec is one mapping")
        native = dict(docs[0].data)
        if team is not None:
            native["team"] = team
        return native, []
    imported = import_scalers(docs)
    if len(imported) != 1:
        raise ManifestError(where, f"{len(imported)} scaler objects; give one per file")
    found = imported[0]
    if found.floors:
        raise ManifestError(
            where, f"{found.name}: cron triggers are not followed by a live service"
        )
    pod = found.pod
    if pod.tolerations or pod.affinity:
        raise ManifestError(
            where,
            f"Deployment {found.deployment}: tolerations and affinity are not kept by a live "
            "service's replicas (requests and nodeSelector are)",
        )
    body: dict[str, Any] = {
        "name": found.name,
        "team": team or _team_label(docs, default_team, found.name, found.deployment),
        "replica": {
            "requests": {r: format_quantity(v, r) for r, v in pod.requests.items()},
            "node_selector": dict(pod.node_selector),
        },
        "scaler": found.scaler.model_dump(mode="json", exclude_defaults=True),
    }
    _hpa_queries(docs, found.name, body["scaler"]["triggers"])
    if pod.priority_class is not None:
        body["priority"] = pod.priority_class
    return body, list(found.notes)


def _team_label(docs: list[Document], default: str | None, *names: str) -> str:
    for doc in docs:
        data = doc.data if isinstance(doc.data, dict) else {}
        meta = data.get("metadata") or {}
        if meta.get("name") in names and data.get("kind") in MANIFEST_KINDS:
            labels = meta.get("labels") or {}
            if isinstance(labels, dict) and isinstance(labels.get(TEAM_LABEL), str):
                return str(labels[TEAM_LABEL])
    if default is not None:
        return default
    raise ManifestError(
        docs[0].where, f"no team: label the scaler or Deployment {TEAM_LABEL}, or give --team"
    )


def _hpa_queries(docs: list[Document], name: str, triggers: list[dict[str, Any]]) -> None:
    """Give the triggers of the HPA ``name`` (if it is one) their annotated queries, in the
    order of its ``spec.metrics``."""
    for doc in docs:
        data = doc.data if isinstance(doc.data, dict) else {}
        meta = data.get("metadata") or {}
        if data.get("kind") != "HorizontalPodAutoscaler" or meta.get("name") != name:
            continue
        annotations = meta.get("annotations") or {}
        server = annotations.get(SERVER_ANNOTATION)
        for i, (metric, trigger) in enumerate(zip(data["spec"]["metrics"], triggers, strict=True)):
            kind = metric["type"]
            metric_name = metric[kind[0].lower() + kind[1:]]["metric"]["name"]
            query = annotations.get(QUERY_ANNOTATION + metric_name)
            if query is None:
                continue
            if not isinstance(server, str):
                raise ManifestError(
                    doc.where,
                    f"HorizontalPodAutoscaler {name}: metadata.annotations.{SERVER_ANNOTATION} "
                    f"names the Prometheus server spec.metrics[{i}]'s query is sent to",
                )
            trigger["prometheus"] = {"server_address": server, "query": str(query)}
