"""``apps/v1`` StatefulSet (Kueue's ``statefulset`` integration, on its pod-group
integration): the StatefulSet is not queued; Kueue's webhook makes its pods one pod group
(named after it, of ``replicas`` pods, default 1), admitted as soon as its first pod exists
(the controller creates them one at a time) and serving (its pods are replaced, it does not
finish). Read here as its pods ``<name>-0``, ``<name>-1``, ... of that group."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetshare.manifests.kinds.base import (
    FAST_ADMISSION,
    POD_GROUP_COUNT,
    POD_GROUP_LABEL,
    SERVING,
    Expansion,
    Ops,
    PodGroupKind,
    governing_labels,
    merge_all,
)
from fleetshare.manifests.kinds.deployment import TEMPLATE_LABELS, replica_pods
from fleetshare.manifests.values import Fields

LWS_NAME = "leaderworkerset.sigs.k8s.io/name"


class StatefulSet(PodGroupKind):
    kind = "StatefulSet"
    api_versions = ("apps/v1",)
    plural = "statefulsets"
    crd = False
    summary = "one pod group: ``replicas`` (default 1) pods of its template"

    def template_ops(self, obj: Mapping[str, Any]) -> Ops:
        meta = obj.get("metadata") or {}
        labels = governing_labels(obj)
        if not labels or LWS_NAME in (meta.get("labels") or {}):
            return []  # a LeaderWorkerSet's StatefulSets: its pods are grouped by it
        count = (obj.get("spec") or {}).get("replicas")
        annotations = {
            POD_GROUP_COUNT: str(count if isinstance(count, int) else 1),
            FAST_ADMISSION: "true",
            SERVING: "true",
        }
        return merge_all(obj, [
            (TEMPLATE_LABELS, {**labels, POD_GROUP_LABEL: str(meta.get("name"))}),
            (("spec", "template", "metadata", "annotations"), annotations),
        ])  # fmt: skip

    def expand(self, fields: Fields, doc: dict[str, Any]) -> Expansion:
        return Expansion(replica_pods(self, fields, doc))


STATEFULSET = StatefulSet()
