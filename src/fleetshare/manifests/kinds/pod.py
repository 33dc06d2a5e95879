"""``v1`` Pod: ``main``, 1 pod, admitted by removing the operator's scheduling gate. Pods
sharing ``kueue.x-k8s.io/pod-group-name`` form one workload of
``kueue.x-k8s.io/pod-group-total-count`` pods (assembled by the manifest reader and the
operator; a group annotated ``kueue.x-k8s.io/pod-group-fast-admission`` is admitted once its
first pod exists, counting the total)."""

from __future__ import annotations

from typing import Any

from fleetshare.manifests.kinds.base import KindPods, PodKind, RawPodSet
from fleetshare.manifests.pods import read_pod_spec
from fleetshare.manifests.values import Fields


class Pod(PodKind):
    kind = "Pod"
    api_versions = ("v1",)
    plural = "pods"
    crd = False
    summary = "``main``: 1 (a pod group: one pod set per pod shape, the group's pods)"

    def read(self, fields: Fields, doc: dict[str, Any]) -> KindPods:
        return KindPods((RawPodSet("main", 1, read_pod_spec(fields, doc.get("spec"), "spec")),))


POD = Pod()
