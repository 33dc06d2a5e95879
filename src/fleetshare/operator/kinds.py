"""The workload kinds in the operator: pure.

What a kind is (its pod sets, suspend flag, how it runs with node selectors, when it is done)
lives in one registry, :mod:`fleetshare.manifests.kinds`; here are its API resources and the
JSON patches the operator writes around the kind's own (a ``test`` of the resourceVersion, the
operator's annotations). A kind admitted by suspension waits suspended until admitted;
admitting it runs it with each pod set's flavor node selector injected; preempting it
suspends it again (its controller deletes the pods); a suspended, preempted one gets back what
its owner wrote. Kinds queued through their pods (Deployment, StatefulSet, LeaderWorkerSet)
are marked by the webhook (:mod:`.webhook`) and governed through their pods. The CRD kinds are
watched only where their CRDs are installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetshare.manifests.kinds import KINDS, POD_GROUPS, SUSPENDED, SuspendedKind, WorkloadKind
from fleetshare.manifests.kinds.base import Injected, Ops, pointer
from fleetshare.manifests.kinds.job import COMPLETION_INDEX, JOB, job_pods_succeeded
from fleetshare.operator.kube import Resource


def resource(kind: WorkloadKind) -> Resource:
    """The API resource of ``kind`` (the apiVersion the operator watches)."""
    return Resource(kind.kind, kind.api_versions[0], kind.plural, True)


RESOURCES: dict[str, Resource] = {name: resource(k) for name, k in SUSPENDED.items()}
"""The kinds admitted by suspension, as the resources the operator watches and patches."""
OPTIONAL: tuple[SuspendedKind, ...] = tuple(k for k in SUSPENDED.values() if k.crd)
"""Kinds whose CRDs may be missing (watched only where served)."""


def annotation_ops(obj: Mapping[str, Any], annotations: Mapping[str, str | None]) -> Ops:
    """JSON-patch operations setting ``annotations`` (None: removing the key)."""
    current = (obj.get("metadata") or {}).get("annotations")
    ops: Ops = []
    if not isinstance(current, Mapping):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
        current = {}
    for key, value in annotations.items():
        where = pointer(("metadata", "annotations", key))
        if value is not None:
            ops.append({"op": "add", "path": where, "value": value})
        elif key in current:
            ops.append({"op": "remove", "path": where})
    return ops


def admission_ops(
    obj: Mapping[str, Any],
    kind: SuspendedKind,
    selectors: Mapping[str, Mapping[str, str]],
    old_keys: Injected,
    annotations: Mapping[str, str | None],
    counts: Mapping[str, int] | None = None,
) -> Ops:
    """A JSON patch admitting ``obj``: only if its resourceVersion is still the one the
    decision saw (a ``test``), ``annotations`` set, and the kind run with each pod set's
    ``selectors`` in place of the keys injected before (``old_keys``; the kind's
    :meth:`~SuspendedKind.run_ops`) and, partially admitted, with ``counts`` pods
    (:meth:`~SuspendedKind.resize_ops`). A JSON patch, not a merge patch, because templates sit in
    lists a merge patch would replace whole."""
    meta = obj.get("metadata") or {}
    return [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")},
        *annotation_ops(obj, annotations),
        *kind.run_ops(obj, selectors, old_keys),
        *kind.resize_ops(obj, counts or {}),
    ]


__all__ = [
    "COMPLETION_INDEX",
    "JOB",
    "KINDS",
    "OPTIONAL",
    "POD_GROUPS",
    "RESOURCES",
    "SUSPENDED",
    "admission_ops",
    "annotation_ops",
    "job_pods_succeeded",
    "resource",
]
