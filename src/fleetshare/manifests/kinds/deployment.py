"""``apps/v1`` Deployment (Kueue's ``deployment`` integration, on its pod integration): the
Deployment is not queued; Kueue's webhook copies its queue name into the pod template, and each
pod it creates is a workload of its own (1 pod), gated until admitted; a scaled-out pod waits
for quota, a preempted one is replaced and waits again. Read here as its ``replicas`` pods
(default 1), ``<name>-0``, ``<name>-1``, ..."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetshare.manifests.kinds.base import (
    Expansion,
    Ops,
    PodGroupKind,
    apply_ops,
    carried_annotations,
    check_api_version,
    governing_labels,
    merge_ops,
    pod_object,
    spec_of,
)
from fleetshare.manifests.values import Fields

TEMPLATE_LABELS = ("spec", "template", "metadata", "labels")


def replicas(fields: Fields, spec: Mapping[str, Any]) -> int:
    """``spec.replicas`` (default 1), refused at 0: nothing would be queued."""
    count = fields.whole(spec.get("replicas"), "spec.replicas", default=1)
    if count == 0:
        raise fields.error("spec.replicas", "is 0: it runs no pods")
    return count


class Deployment(PodGroupKind):
    kind = "Deployment"
    api_versions = ("apps/v1",)
    plural = "deployments"
    crd = False
    summary = "each pod a workload of its own: ``replicas`` (default 1) workloads of 1 pod"

    def template_ops(self, obj: Mapping[str, Any]) -> Ops:
        return merge_ops(obj, TEMPLATE_LABELS, governing_labels(obj))

    def expand(self, fields: Fields, doc: dict[str, Any]) -> Expansion:
        note = "a Deployment's pods are queued one by one, each a workload of its own (Kueue)"
        return Expansion(replica_pods(self, fields, doc), (note,))


def replica_pods(kind: PodGroupKind, fields: Fields, doc: dict[str, Any]) -> tuple[Any, ...]:
    """The pods a Deployment or StatefulSet ``doc`` creates (``<name>-0`` ...), from its pod
    template as ``kind``'s webhook marks it."""
    check_api_version(fields, kind, doc)
    marked = apply_ops(doc, kind.template_ops(doc))
    spec = spec_of(fields, marked)
    template = fields.mapping(spec.get("template"), "spec.template", required=True)
    meta = marked.get("metadata") or {}
    return tuple(
        pod_object(f"{meta.get('name')}-{i}", str(meta.get("namespace") or "default"),
                   template, {}, carried_annotations(doc))
        for i in range(replicas(fields, spec))
    )  # fmt: skip


DEPLOYMENT = Deployment()
