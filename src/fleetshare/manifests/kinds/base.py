"""What a workload kind is: one interface, modelled on Kueue's jobframework ``GenericJob``.

Every kind Kueue admits is of one of these sorts (:attr:`WorkloadKind.admission`):

- ``suspend`` (:class:`SuspendedKind`: a Job, JobSet, Kubeflow job, Ray kind, AppWrapper,
  SparkApplication): the object itself is the workload. It says how to read its pod sets
  (:meth:`~SuspendedKind.read`), where its suspend flag is, how to run it with each pod set's
  node selector injected (:meth:`~SuspendedKind.run_ops`, Kueue's ``RunWithPodSetsInfo``), how
  to restore what its owner wrote (:meth:`~SuspendedKind.restore_ops`) and when it is finished.
- ``gate`` (the Pod): a bare pod, or a pod group, waits behind a scheduling gate.
- ``pods`` (:class:`PodGroupKind`: Deployment, StatefulSet, LeaderWorkerSet) and ``jobs``
  (CronJob): the object is not queued itself. Kueue's webhook marks its pod template (or its
  pods) so that its pods are queued as pods or pod groups (:meth:`~PodGroupKind.template_ops`,
  :meth:`~PodGroupKind.pod_ops`), or its Jobs as Jobs; the manifest reader reads the object as
  the pods or Jobs it would create (:meth:`~PodGroupKind.expand`).

Changes to objects are JSON patches (lists of operations), pure: the operator sends them, the
webhook answers with them, and :func:`apply_ops` applies them to a copy (what the manifest
reader and the operator's parser read). Nothing here reads a cluster.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fleetshare.manifests.pods import PodShape
from fleetshare.manifests.values import Fields, join

Path = tuple[str | int, ...]
"""A field path in an object: keys and list indexes."""
Ops = list[dict[str, Any]]
"""A JSON patch (RFC 6902)."""
Injected = Mapping[str, Sequence[str]]
"""The node-selector keys injected at admission, per pod set (Kueue keeps each pod set's own
node selector in the workload's podSetInfo); ``"*"`` names keys injected into every pod set
(what an operator before this record wrote: one list for the whole object)."""


def injected_for(injected: Injected, podset: str) -> Sequence[str]:
    """The keys injected into ``podset``'s node selector."""
    return injected.get(podset) or injected.get("*") or ()


Admission = Literal["suspend", "gate", "pods", "jobs"]
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
TEAM_LABEL = "fleetshare.io/team"
GOVERNING_LABELS = (QUEUE_LABEL, TEAM_LABEL)
"""The labels that put an object under governance (a LocalQueue, or a fleetshare team)."""
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"
FAST_ADMISSION = "kueue.x-k8s.io/pod-group-fast-admission"
"""A pod group annotation: admitted once its first pod exists (a StatefulSet's pods come one
at a time), counting ``pod-group-total-count`` pods."""
SERVING = "kueue.x-k8s.io/pod-group-serving"
"""A pod group annotation: the group serves (its pods are replaced, it does not finish)."""


@dataclass(frozen=True, slots=True)
class RawPodSet:
    """``count`` pods of one shape, before they become a model ``PodSet``."""

    name: str
    count: int
    shape: PodShape
    min_count: int | None = None
    """Partial admission: as few pods as this may run (a Job's job-min-parallelism)."""


@dataclass(frozen=True, slots=True)
class KindPods:
    """A kind's pod sets, the notes on what was not modelled and, where the kind names one
    before its pod templates (a Kubeflow job's ``runPolicy.schedulingPolicy.priorityClass``),
    the priority class and the field it came from."""

    podsets: tuple[RawPodSet, ...]
    notes: tuple[str, ...] = ()
    priority: tuple[str, str] | None = None


def get(obj: Any, path: Path) -> Any:
    """The value at ``path`` (None where the path leads nowhere)."""
    for part in path:
        if isinstance(part, int):
            obj = obj[part] if isinstance(obj, list) and 0 <= part < len(obj) else None
        else:
            obj = obj.get(part) if isinstance(obj, Mapping) else None
    return obj


def pointer(path: Path) -> str:
    """A JSON pointer (RFC 6901) to ``path``."""
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in path)


def set_ops(obj: Mapping[str, Any], path: Path, value: Any) -> Ops:
    """Operations setting ``path`` to ``value``, making the maps on its way."""
    ops: Ops = []
    for depth in range(1, len(path)):
        if not isinstance(get(obj, path[:depth]), Mapping):
            ops.append({"op": "add", "path": pointer(path[:depth]), "value": {}})
    ops.append({"op": "add", "path": pointer(path), "value": value})
    return ops


def merge_ops(obj: Mapping[str, Any], path: Path, entries: Mapping[str, str]) -> Ops:
    """Operations adding ``entries`` to the string map at ``path`` (labels, annotations),
    keys already there with the same value left alone."""
    current = get(obj, path)
    if not isinstance(current, Mapping):
        return set_ops(obj, path, dict(entries)) if entries else []
    return [
        {"op": "add", "path": pointer((*path, key)), "value": value}
        for key, value in entries.items()
        if current.get(key) != value
    ]


def merge_all(obj: Mapping[str, Any], entries: Sequence[tuple[Path, Mapping[str, str]]]) -> Ops:
    """:func:`merge_ops` for several maps, each made against the object the ones before make
    (two maps under one missing parent must not each create it)."""
    ops: Ops = []
    current = obj
    for path, values in entries:
        more = merge_ops(current, path, values)
        if more:
            ops += more
            current = apply_ops(current, more)
    return ops


def apply_ops(obj: Mapping[str, Any], ops: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A copy of ``obj`` with the JSON patch ``ops`` applied (``add``, ``replace``,
    ``remove``; ``test`` is skipped: the copy is what the patch would make of ``obj``)."""
    out: dict[str, Any] = copy.deepcopy(dict(obj))
    for op in ops:
        if op["op"] == "test":
            continue
        parts = [p.replace("~1", "/").replace("~0", "~") for p in str(op["path"]).split("/")[1:]]
        parent: Any = out
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if op["op"] == "remove":
                del parent[index]
            elif op["op"] == "add":
                parent.insert(index, copy.deepcopy(op["value"]))
            else:
                parent[index] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del parent[last]
        else:
            parent[last] = copy.deepcopy(op["value"])
    return out


def true_condition(obj: Mapping[str, Any], types: Sequence[str]) -> bool:
    """A status condition of one of ``types`` is True."""
    return any(
        c.get("type") in types and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or ()
    )


def governing_labels(obj: Mapping[str, Any]) -> dict[str, str]:
    """The object's queue or team label (what Kueue's webhooks copy to pod templates)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return {k: str(labels[k]) for k in GOVERNING_LABELS if k in labels}


def check_api_version(fields: Fields, kind: WorkloadKind, doc: Mapping[str, Any]) -> None:
    """Refuse an apiVersion the kind is not read in."""
    api_version = doc.get("apiVersion")
    if api_version not in kind.api_versions:
        raise fields.error(
            "apiVersion",
            f"{api_version} is not supported for {kind.kind} (supported: "
            f"{', '.join(kind.api_versions)})",
        )


def spec_of(fields: Fields, doc: Mapping[str, Any]) -> dict[str, Any]:
    return fields.mapping(doc.get("spec"), "spec", required=True)


def deadline_notes(spec: Mapping[str, Any], path: str) -> list[str]:
    """``activeDeadlineSeconds`` is read by the kinds' controllers, not modelled here."""
    if spec.get("activeDeadlineSeconds") is not None:
        return [
            f"{join(path, 'activeDeadlineSeconds')}: not applied; the run time is the "
            "fleetshare.io/duration annotation or the scenario's duration"
        ]
    return []


class WorkloadKind(ABC):
    """A kind fleetshare governs as Kueue does (see the module docstring)."""

    kind: str
    """The kind's name (``PyTorchJob``)."""
    api_versions: tuple[str, ...]
    """The apiVersions read; the first is the one the operator watches and its webhook hooks."""
    plural: str
    """The resource name (``pytorchjobs``)."""
    admission: Admission
    crd: bool = True
    """A custom resource (the operator watches it only where its CRD is installed)."""
    summary: str = ""
    """How its pods are counted, for the documentation's table."""

    @property
    def group(self) -> str:
        """The API group ("" for the core group)."""
        return self.api_versions[0].rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_versions[0].rpartition("/")[2]


class PodSetKind(WorkloadKind):
    """A kind whose object is the workload: it reads its own pod sets."""

    @abstractmethod
    def read(self, fields: Fields, doc: dict[str, Any]) -> KindPods:
        """The pod sets of ``doc`` (Kueue's ``PodSets``), each field read checked."""


class SuspendedKind(PodSetKind):
    """A kind admitted by suspension (Kueue's ``GenericJob``)."""

    admission: Admission = "suspend"
    suspend_path: Path = ("spec", "suspend")
    """Where the suspend flag is."""

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        """Kueue's ``IsSuspended``."""
        return bool(get(obj, self.suspend_path))

    def suspend_ops(self, obj: Mapping[str, Any], value: bool) -> Ops:
        """The patch setting the suspend flag (Kueue's ``Suspend``, and its undoing)."""
        return set_ops(obj, self.suspend_path, value)

    @abstractmethod
    def selector_paths(self, obj: Mapping[str, Any]) -> dict[str, Path]:
        """Pod-set name -> the path of the map whose ``nodeSelector`` that pod set's pods get
        (a pod spec; a SparkApplication's driver or executor spec), by the names :meth:`read`
        gives."""

    def _owners_selectors(
        self, obj: Mapping[str, Any], old: Injected
    ) -> dict[Path, dict[str, str]]:
        """Each node-selector map the pod sets' pods get, as its owner wrote it: the keys
        injected before (``old``, of every pod set sharing the map) taken off."""
        paths = self.selector_paths(obj)
        out: dict[Path, dict[str, str]] = {}
        for path in dict.fromkeys(paths.values()):
            if not isinstance(get(obj, path), Mapping):
                continue
            drop = {k for n, p in paths.items() if p == path for k in injected_for(old, n)}
            current = get(obj, (*path, "nodeSelector")) or {}
            out[path] = {k: v for k, v in current.items() if k not in drop}
        return out

    def injected(
        self, obj: Mapping[str, Any], selectors: Mapping[str, Mapping[str, str]], old: Injected
    ) -> dict[str, list[str]]:
        """The keys :meth:`run_ops` injects per pod set: those of ``selectors[name]`` its
        owner's node selector does not already hold with that value (a pod set that selects
        its flavor itself keeps its own selector when it is preempted)."""
        owners = self._owners_selectors(obj, old)
        out: dict[str, list[str]] = {}
        for name, path in self.selector_paths(obj).items():
            own = owners.get(path, {})  # none yet (an AppWrapper's podSetInfos): all injected
            keys = sorted(k for k, v in selectors.get(name, {}).items() if own.get(k) != v)
            if keys:
                out[name] = keys
        return out

    def run_ops(
        self,
        obj: Mapping[str, Any],
        selectors: Mapping[str, Mapping[str, str]],
        old_keys: Injected,
    ) -> Ops:
        """Kueue's ``RunWithPodSetsInfo``: unsuspend, each pod set's node selector given
        ``selectors[name]`` in place of the keys injected before (``old_keys``); pod sets
        sharing one node selector (a SparkApplication's ``spec.nodeSelector``) get the union."""
        ops = self.suspend_ops(obj, False)
        merged = self._owners_selectors(obj, old_keys)
        for name, path in self.selector_paths(obj).items():
            if path in merged:
                merged[path].update(selectors.get(name, {}))
        for path, selector in merged.items():
            ops.append({"op": "add", "path": pointer((*path, "nodeSelector")), "value": selector})
        return ops

    def resize_ops(self, obj: Mapping[str, Any], counts: Mapping[str, int]) -> Ops:
        """The patch running pod sets with ``counts`` pods (by the names :meth:`read` gives):
        partial admission (Kueue's ``RunWithPodSetsInfo`` setting a count), or giving the
        counts back (``RestorePodSetsInfo``). None for a kind partial admission does not
        apply to (only a Job's pod set has a minimum count)."""
        return []

    def restore_ops(self, obj: Mapping[str, Any], old_keys: Injected) -> Ops:
        """Kueue's ``RestorePodSetsInfo``: the node selector keys injected at admission
        (``old_keys``, per pod set) taken off, so the object shows what its owner wrote."""
        ops: Ops = []
        for path, kept in self._owners_selectors(obj, old_keys).items():
            current = get(obj, (*path, "nodeSelector"))
            if isinstance(current, Mapping) and current and kept != current:
                ops.append({"op": "add", "path": pointer((*path, "nodeSelector")), "value": kept})
        return ops

    @abstractmethod
    def finished(self, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
        """Kueue's ``Finished``: the workload is done (its quota is free), from the object and
        its ``pods``."""

    def makes(self, obj: Mapping[str, Any]) -> bool:
        """An object its controller made that names no owner of this kind (a SparkApplication's
        executor pods are owned by the driver pod): not governed apart."""
        return False


class PodKind(PodSetKind):
    """The Pod: one pod, or a pod group (pods sharing ``kueue.x-k8s.io/pod-group-name``),
    admitted by removing a scheduling gate."""

    admission: Admission = "gate"


@dataclass(frozen=True, slots=True)
class Expansion:
    """The objects (pods, or Jobs) an object creates, and notes on the expansion."""

    objects: tuple[dict[str, Any], ...]
    notes: tuple[str, ...] = ()


class PodGroupKind(WorkloadKind):
    """A kind queued through the pods (``pods``) or Jobs (``jobs``) it creates."""

    admission: Admission = "pods"

    @abstractmethod
    def expand(self, fields: Fields, doc: dict[str, Any]) -> Expansion:
        """The objects (pods, or Jobs) ``doc`` creates, as Kueue queues them: what the manifest
        reader reads in its place."""

    def template_ops(self, obj: Mapping[str, Any]) -> Ops:
        """What the webhook adds to a governed object at creation so that its pods are queued
        (Kueue's webhook for the kind)."""
        return []

    def pod_ops(self, pod: Mapping[str, Any]) -> Ops:
        """What the webhook adds to a governed pod this kind's controller creates (a
        LeaderWorkerSet's pods: their group)."""
        return []


def carried_annotations(doc: Mapping[str, Any]) -> dict[str, str]:
    """The object's ``fleetshare.io/`` annotations (run time, submit time), which the objects
    the manifest reader expands it into carry."""
    annotations = (doc.get("metadata") or {}).get("annotations") or {}
    return {k: v for k, v in annotations.items() if str(k).startswith("fleetshare.io/")}


def pod_object(
    name: str,
    namespace: str,
    template: Mapping[str, Any],
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
) -> dict[str, Any]:
    """A pod as a controller creates it from ``template``, with ``labels`` and ``annotations``
    added to the template's."""
    meta = template.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**(meta.get("labels") or {}), **labels},
            "annotations": {**(meta.get("annotations") or {}), **annotations},
        },
        "spec": copy.deepcopy(template.get("spec")),
    }
