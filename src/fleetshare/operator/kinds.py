"""Workload kinds admitted by suspension, Kueue's way: pure.

A batch/v1 Job, a JobSet, a Kubeflow PyTorchJob, a RayCluster or a RayJob waits suspended
until admitted; admitting it unsuspends it with each pod set's flavor node selector injected
into that pod set's template; preempting it suspends it again (its controller deletes the
pods). Each :class:`Suspendable` says where the kind keeps its suspend flag, its pod
templates (by the pod-set names :mod:`fleetshare.manifests` gives) and when it is finished:
a batch/v1 Job as soon as its pods have succeeded (:func:`job_pods_succeeded`), before its
controller marks it ``Complete``; the other kinds when their controller says so.
The CRD kinds are watched only where their CRDs are installed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleetshare.operator.kube import JOBS, Resource

Path = tuple[str | int, ...]


def _true(obj: Mapping[str, Any], types: Sequence[str]) -> bool:
    return any(
        c.get("type") in types and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or ()
    )


def _get(obj: Any, path: Path) -> Any:
    for part in path:
        if isinstance(part, int):
            obj = obj[part] if isinstance(obj, list) and part < len(obj) else None
        else:
            obj = obj.get(part) if isinstance(obj, Mapping) else None
    return obj


def _ray_templates(obj: Mapping[str, Any], base: Path) -> dict[str, Path]:
    out: dict[str, Path] = {"head": (*base, "headGroupSpec", "template", "spec")}
    for i, group in enumerate(_get(obj, (*base, "workerGroupSpecs")) or ()):
        if isinstance(group, Mapping) and group.get("groupName"):
            out[str(group["groupName"])] = (*base, "workerGroupSpecs", i, "template", "spec")
    return out


def _jobset_templates(obj: Mapping[str, Any]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for i, job in enumerate(_get(obj, ("spec", "replicatedJobs")) or ()):
        if isinstance(job, Mapping) and job.get("name"):
            out[str(job["name"])] = ("spec", "replicatedJobs", i, "template", "spec",
                                     "template", "spec")  # fmt: skip
    return out


def _pytorch_templates(obj: Mapping[str, Any]) -> dict[str, Path]:
    specs = _get(obj, ("spec", "pytorchReplicaSpecs")) or {}
    return {k.lower(): ("spec", "pytorchReplicaSpecs", k, "template", "spec") for k in specs}


@dataclass(frozen=True)
class Suspendable:
    """A kind admitted by unsuspending it."""

    res: Resource
    suspend: Path
    """Where the suspend flag is."""
    templates: Callable[[Mapping[str, Any]], dict[str, Path]]
    """Pod-set name -> the path of that pod set's pod spec."""
    finished: Callable[[Mapping[str, Any], Sequence[Mapping[str, Any]]], bool]
    """The workload is done (its quota is free), from the object and its pods."""

    @property
    def kind(self) -> str:
        return self.res.kind

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        return bool(_get(obj, self.suspend))

    def pod_specs(self, obj: Mapping[str, Any]) -> list[Path]:
        return list(self.templates(obj).values())


COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
"""The annotation (and label) giving an Indexed Job's pod its completion index."""


def job_pods_succeeded(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
    """A batch/v1 Job's work is done by its pods' account, whatever its conditions say yet:
    its successes reach ``spec.completions`` (successes: the Job's ``status.succeeded`` plus
    the successes it has not counted yet, or its pods in phase ``Succeeded``, whichever is
    more; an Indexed Job counts distinct completion indexes); without ``completions``, a pod
    succeeded and every pod has terminated (the Job controller's own rule). ``pods`` are
    the Job's own. Everything read lives in the API server, so a restart decides alike."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    completions = spec.get("completions")
    succeeded = [p for p in pods if (p.get("status") or {}).get("phase") == "Succeeded"]
    counted = int(status.get("succeeded") or 0)
    if spec.get("completionMode") == "Indexed":
        distinct = len({_pod_index(p) for p in succeeded} - {None})
    else:
        distinct = len({_pod_id(p) for p in succeeded})
        uncounted = (status.get("uncountedTerminatedPods") or {}).get("succeeded") or ()
        counted += len(uncounted)
    successes = max(counted, distinct)
    if isinstance(completions, int):
        return successes >= completions
    terminated = all((p.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                     for p in pods)  # fmt: skip
    return successes >= 1 and terminated


def _pod_id(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or ""), str(meta.get("name") or "")


def _pod_index(pod: Mapping[str, Any]) -> str | None:
    meta = pod.get("metadata") or {}
    index = (meta.get("annotations") or {}).get(COMPLETION_INDEX)
    return index if index is not None else (meta.get("labels") or {}).get(COMPLETION_INDEX)


JOB = Suspendable(
    JOBS, ("spec", "suspend"), lambda o: {"main": ("spec", "template", "spec")},
    lambda o, pods: _true(o, ("Complete", "Failed")) or job_pods_succeeded(o, pods),
)  # fmt: skip
JOBSET = Suspendable(
    Resource("JobSet", "jobset.x-k8s.io/v1alpha2", "jobsets", True), ("spec", "suspend"),
    _jobset_templates, lambda o, pods: _true(o, ("Completed", "Failed")),
)  # fmt: skip
PYTORCHJOB = Suspendable(
    Resource("PyTorchJob", "kubeflow.org/v1", "pytorchjobs", True),
    ("spec", "runPolicy", "suspend"), _pytorch_templates,
    lambda o, pods: _true(o, ("Succeeded", "Failed")),
)  # fmt: skip
RAYCLUSTER = Suspendable(
    Resource("RayCluster", "ray.io/v1", "rayclusters", True), ("spec", "suspend"),
    lambda o: _ray_templates(o, ("spec",)), lambda o, pods: False,  # runs until deleted
)  # fmt: skip
RAYJOB = Suspendable(
    Resource("RayJob", "ray.io/v1", "rayjobs", True), ("spec", "suspend"),
    lambda o: _ray_templates(o, ("spec", "rayClusterSpec")),
    lambda o, pods: (o.get("status") or {}).get("jobDeploymentStatus") in ("Complete", "Failed"),
)  # fmt: skip

SUSPENDABLE = {k.kind: k for k in (JOB, JOBSET, PYTORCHJOB, RAYCLUSTER, RAYJOB)}
"""The kinds admitted by suspension, by kind name."""
OPTIONAL = (JOBSET, PYTORCHJOB, RAYCLUSTER, RAYJOB)
"""Kinds whose CRDs may be missing (watched only where served)."""


def _pointer(path: Path) -> str:
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in path)


def suspend_ops(obj: Mapping[str, Any], kind: Suspendable, value: bool) -> list[dict[str, Any]]:
    """JSON-patch operations setting the suspend flag (making the maps on its way)."""
    ops: list[dict[str, Any]] = []
    for depth in range(1, len(kind.suspend)):
        if not isinstance(_get(obj, kind.suspend[:depth]), Mapping):
            ops.append({"op": "add", "path": _pointer(kind.suspend[:depth]), "value": {}})
    ops.append({"op": "add", "path": _pointer(kind.suspend), "value": value})
    return ops


def annotation_ops(
    obj: Mapping[str, Any], annotations: Mapping[str, str | None]
) -> list[dict[str, Any]]:
    """JSON-patch operations setting ``annotations`` (None: removing the key)."""
    current = (obj.get("metadata") or {}).get("annotations")
    ops: list[dict[str, Any]] = []
    if not isinstance(current, Mapping):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
        current = {}
    for key, value in annotations.items():
        where = _pointer(("metadata", "annotations", key))
        if value is not None:
            ops.append({"op": "add", "path": where, "value": value})
        elif key in current:
            ops.append({"op": "remove", "path": where})
    return ops


def release_ops(
    obj: Mapping[str, Any], kind: Suspendable, old_keys: Sequence[str]
) -> list[dict[str, Any]]:
    """A JSON patch taking the node selector keys injected at admission (``old_keys``) off
    every pod template of a suspended ``obj``, as Kueue restores a preempted job's pod sets:
    requeued, it may run on another flavor, and its spec shows what its owner wrote."""
    ops: list[dict[str, Any]] = []
    for path in kind.templates(obj).values():
        spec = _get(obj, path)
        if not isinstance(spec, Mapping) or not spec.get("nodeSelector"):
            continue
        selector = {k: v for k, v in spec["nodeSelector"].items() if k not in old_keys}
        if selector != spec["nodeSelector"]:
            ops.append({"op": "add", "path": _pointer((*path, "nodeSelector")), "value": selector})
    return ops


def admission_ops(
    obj: Mapping[str, Any],
    kind: Suspendable,
    selectors: Mapping[str, Mapping[str, str]],
    old_keys: Sequence[str],
    annotations: Mapping[str, str | None],
) -> list[dict[str, Any]]:
    """A JSON patch admitting ``obj``: only if its resourceVersion is still the one the
    decision saw (a ``test``), ``annotations`` set, unsuspended, and each pod set's template
    given its ``selectors`` in place of the keys injected before (``old_keys``). A JSON patch,
    not a merge patch, because templates sit in lists a merge patch would replace whole."""
    meta = obj.get("metadata") or {}
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")},
        *annotation_ops(obj, annotations),
        *suspend_ops(obj, kind, False),
    ]
    for name, path in kind.templates(obj).items():
        spec = _get(obj, path)
        if not isinstance(spec, Mapping):
            continue
        selector = {k: v for k, v in (spec.get("nodeSelector") or {}).items() if k not in old_keys}
        selector.update(selectors.get(name, {}))
        ops.append({"op": "add", "path": _pointer((*path, "nodeSelector")), "value": selector})
    return ops
