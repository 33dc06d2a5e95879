"""``leaderworkerset.x-k8s.io/v1`` LeaderWorkerSet (Kueue's ``leaderworkerset`` integration):
not queued itself; each of its ``replicas`` groups (default 1) is a pod group of ``size``
pods (default 1): a leader (``leaderTemplate``, else ``workerTemplate``) and ``size - 1``
workers, serving. Kueue's webhook puts the queue name on both templates; the group of each
pod is named from the labels the LeaderWorkerSet controller gives it (``<name>-<group
index>``, of the ``size`` annotation). Only the LeaderCreated startup policy is admitted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetshare.manifests.kinds.base import (
    POD_GROUP_COUNT,
    POD_GROUP_LABEL,
    SERVING,
    Expansion,
    Ops,
    Path,
    PodGroupKind,
    apply_ops,
    carried_annotations,
    check_api_version,
    get,
    governing_labels,
    merge_all,
    pod_object,
    spec_of,
)
from fleetshare.manifests.values import Fields

NAME = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
SIZE = "leaderworkerset.sigs.k8s.io/size"
TEMPLATES = ("leaderTemplate", "workerTemplate")


class LeaderWorkerSet(PodGroupKind):
    kind = "LeaderWorkerSet"
    api_versions = ("leaderworkerset.x-k8s.io/v1",)
    plural = "leaderworkersets"
    summary = (
        "one pod group per replica (``replicas``, default 1): a leader and ``size - 1`` "
        "workers (``size`` default 1)"
    )

    def template_ops(self, obj: Mapping[str, Any]) -> Ops:
        labels = governing_labels(obj)
        if not labels:
            return []
        entries: list[tuple[Path, Mapping[str, str]]] = []
        for name in TEMPLATES:
            base = ("spec", "leaderWorkerTemplate", name)
            if isinstance(get(obj, base), Mapping):
                entries.append(((*base, "metadata", "labels"), labels))
                entries.append(((*base, "metadata", "annotations"), {SERVING: "true"}))
        return merge_all(obj, entries)

    def pod_ops(self, pod: Mapping[str, Any]) -> Ops:
        """A pod of the LeaderWorkerSet's: its group, ``<name>-<group index>``, of ``size``
        pods."""
        meta = pod.get("metadata") or {}
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        if NAME not in labels or GROUP_INDEX not in labels or POD_GROUP_LABEL in labels:
            return []
        group = f"{labels[NAME]}-{labels[GROUP_INDEX]}"
        return merge_all(pod, [
            (("metadata", "labels"), {POD_GROUP_LABEL: group}),
            (("metadata", "annotations"), {POD_GROUP_COUNT: str(annotations.get(SIZE) or "1")}),
        ])  # fmt: skip

    def expand(self, fields: Fields, doc: dict[str, Any]) -> Expansion:
        check_api_version(fields, self, doc)
        marked = apply_ops(doc, self.template_ops(doc))
        spec = spec_of(fields, marked)
        if spec.get("startupPolicy") == "LeaderReady":
            raise fields.error(
                "spec.startupPolicy",
                "only LeaderCreated is admitted (Kueue's webhook refuses LeaderReady)",
            )
        path = "spec.leaderWorkerTemplate"
        lwt = fields.mapping(spec.get("leaderWorkerTemplate"), path, required=True)
        worker = fields.mapping(lwt.get("workerTemplate"), f"{path}.workerTemplate", required=True)
        leader = fields.mapping(lwt.get("leaderTemplate"), f"{path}.leaderTemplate") or worker
        size = fields.whole(lwt.get("size"), f"{path}.size", default=1, minimum=1)
        groups = fields.whole(spec.get("replicas"), "spec.replicas", default=1)
        if groups == 0:
            raise fields.error("spec.replicas", "is 0: it runs no pods")
        meta = marked.get("metadata") or {}
        name, namespace = str(meta.get("name")), str(meta.get("namespace") or "default")
        carried = carried_annotations(doc)
        pods = []
        for g in range(groups):
            for w in range(size):
                labels = {NAME: name, GROUP_INDEX: str(g), WORKER_INDEX: str(w)}
                pod = pod_object(f"{name}-{g}" + (f"-{w}" if w else ""), namespace,
                                 leader if w == 0 else worker, labels,
                                 {**carried, SIZE: str(size)})  # fmt: skip
                pods.append(apply_ops(pod, self.pod_ops(pod)))
        return Expansion(tuple(pods))


LEADERWORKERSET = LeaderWorkerSet()
