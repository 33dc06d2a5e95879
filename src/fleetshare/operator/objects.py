"""Kubernetes objects (plain dicts, as the API serves them) -> fleetshare's model: pure.

- Node objects become :class:`~fleetshare.model.node.Node` s: ``status.allocatable`` (MIG
  partitions as the NVIDIA device plugin names them, ``nvidia.com/mig-1g.10gb``, are ordinary
  extended resources), the Ready condition, ``spec.unschedulable`` (cordoned), taints, and the
  well-known instance-type, zone and capacity-type labels.
- Governed workloads: an object of a kind admitted by suspension (a Job, JobSet, Kubeflow job,
  Ray kind, AppWrapper, SparkApplication: :mod:`fleetshare.manifests.kinds`), a bare Pod, or
  the pods of a Kueue pod group (a StatefulSet's, a LeaderWorkerSet group's), that name a
  queue (``kueue.x-k8s.io/queue-name``) or a team (``fleetshare.io/team``). They are read by
  :mod:`fleetshare.manifests`, so the manifests a scenario reads work unchanged; the
  operator's own annotations and the node selector it injected are taken off first.
- Their state is read back from the objects themselves (:func:`job_phase`, :func:`pods_phase`):
  everything the operator needs after a restart lives in the API server.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from fleetshare.autoscaling.settings import PdbSpec
from fleetshare.manifests import (
    QUEUE_LABEL,
    TEAM_LABEL,
    Document,
    ManifestError,
    PrioritySource,
    parse_manifests,
)
from fleetshare.manifests.kinds import SUSPENDED, SuspendedKind
from fleetshare.manifests.kinds.base import (
    FAST_ADMISSION,
    POD_GROUP_COUNT,
    POD_GROUP_LABEL,
    apply_ops,
)
from fleetshare.model.node import INSTANCE_TYPE_LABEL, ZONE_LABEL, Node, Taint
from fleetshare.model.quantity import parse_quantity
from fleetshare.model.workload import PodSet
from fleetshare.operator.kinds import JOB

GATE = "fleetshare.io/admission"
"""The scheduling gate a governed pod waits behind until its gang is admitted."""
PREFIX = "operator.fleetshare.io/"
ADMISSION = PREFIX + "admission"
"""Annotation: the admission (flavors, placement, time, borrowed) of an admitted workload."""
INJECTED = PREFIX + "injected-node-selector"
"""Annotation: the node-selector keys the operator added to the pod templates (of a kind
admitted by suspension) or to the pod (one let through its gate)."""
PENDING_REASON = PREFIX + "pending-reason"
"""Annotation: why a pending workload waits and its place in its team's queue."""
AUTOSCALER_NOTE = PREFIX + "autoscaler"
"""Annotation: what the autoscaler does for a pending workload (nodes launching for it, or
why it cannot add any)."""
POD_COUNTS = PREFIX + "pod-counts"
"""Annotation: the pod sets' counts as the owner wrote them (a Job's parallelism), while the
object runs with fewer (partial admission): restored on eviction, and what it is read as."""
EVICTION = PREFIX + "last-eviction"
"""Annotation: the last preemption or eviction (reason, by, message, time) and, of a kind
admitted by suspension, the admission it ended (:func:`eviction_record`)."""
CAPACITY_TYPE_LABELS = ("karpenter.sh/capacity-type", "eks.amazonaws.com/capacityType")
BETA_INSTANCE_TYPE = "beta.kubernetes.io/instance-type"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"

Phase = Literal["pending", "admitted", "finished", "outside"]
"""``outside``: a governed object running without the operator's admission (created without
its gate): counted as usage, never admitted again."""


def timestamp(text: str | None) -> float:
    """Seconds since the Unix epoch of a Kubernetes RFC 3339 time (0 when absent)."""
    if not text:
        return 0.0
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# -- nodes --------------------------------------------------------------------------------


def node_from_object(obj: Mapping[str, Any]) -> Node:
    """A Node object as a :class:`Node` (what governance counts as capacity)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    labels = dict(meta.get("labels") or {})
    allocatable: dict[str, int] = {}
    for resource, value in (status.get("allocatable") or {}).items():
        try:
            allocatable[resource] = parse_quantity(str(value))
        except ValueError:
            continue  # a quantity governance cannot count is not offered
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    taints = tuple(
        Taint(str(t.get("key", "")), str(t.get("value", "") or ""), t.get("effect", "NoSchedule"))
        for t in spec.get("taints") or ()
        if t.get("effect") in ("NoSchedule", "NoExecute", "PreferNoSchedule")
    )
    capacity = next((labels[k] for k in CAPACITY_TYPE_LABELS if k in labels), "on-demand")
    return Node(
        name=str(meta["name"]),
        allocatable=allocatable,
        instance_type=labels.get(INSTANCE_TYPE_LABEL) or labels.get(BETA_INSTANCE_TYPE),
        zone=labels.get(ZONE_LABEL) or labels.get(BETA_ZONE),
        labels=labels,
        taints=taints,
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
        capacity_type=capacity.lower().replace("_", "-"),
    )


# -- governed objects ------------------------------------------------------------------------


def governed(obj: Mapping[str, Any]) -> bool:
    """Does the object name a queue or a team (Kueue's label or fleetshare's)?"""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return QUEUE_LABEL in labels or TEAM_LABEL in labels


def owned(obj: Mapping[str, Any]) -> bool:
    """Made by the controller of a kind admitted by suspension (a Job's pods, a JobSet's
    Jobs, a RayJob's RayCluster, an AppWrapper's objects, a SparkApplication's executor pods):
    the owner is the workload, the objects it makes are not governed apart. (The pods of a
    Deployment or StatefulSet, and the Jobs of a CronJob, are governed: Kueue queues them.)"""
    owners = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return any(o.get("kind") in SUSPENDED for o in owners) or any(
        kind.makes(obj) for kind in SUSPENDED.values()
    )


def pod_group(pod: Mapping[str, Any]) -> str | None:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(POD_GROUP_LABEL)


@dataclass(frozen=True, slots=True)
class Admitted:
    """What the admission annotation records."""

    flavors: tuple[str, ...]
    placement: tuple[tuple[tuple[str, int], ...], ...]
    at: float
    team: str
    borrowed: Mapping[str, int]
    counts: tuple[int, ...] = ()
    """Pods admitted per pod set under partial admission (empty: every pod)."""

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "flavors": list(self.flavors),
            "placement": [[[n, c] for n, c in ps] for ps in self.placement],
            "at": self.at,
            "team": self.team,
            "borrowed": dict(self.borrowed),
        }
        if self.counts:
            data["counts"] = list(self.counts)
        return json.dumps(data, sort_keys=True)

    @staticmethod
    def from_json(text: str | None) -> Admitted | None:
        if not text:
            return None
        try:
            data = json.loads(text)
            return Admitted(
                tuple(str(f) for f in data["flavors"]),
                tuple(tuple((str(n), int(c)) for n, c in ps) for ps in data["placement"]),
                float(data["at"]),
                str(data.get("team", "")),
                {str(k): int(v) for k, v in (data.get("borrowed") or {}).items()},
                tuple(int(n) for n in data.get("counts") or ()),
            )
        except (ValueError, KeyError, TypeError):
            return None


def _annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def admission_of(obj: Mapping[str, Any]) -> Admitted | None:
    return Admitted.from_json(_annotations(obj).get(ADMISSION))


def eviction_record(obj: Mapping[str, Any], reason: str, by: str, message: str, at: float) -> str:
    """The :data:`EVICTION` annotation of an eviction of ``obj``: why, by whom, when, and
    the admission record it takes off (``admission``), so the last admission stays on the
    object: a Job whose pods succeeded just as it was evicted completes with it."""
    record: dict[str, Any] = {"reason": reason, "by": by, "message": message, "at": at}
    admitted = admission_of(obj)
    if admitted is not None:
        record["admission"] = json.loads(admitted.to_json())
    return json.dumps(record)


def last_admission(obj: Mapping[str, Any]) -> Admitted | None:
    """The object's admission, or the one its last eviction ended (:func:`eviction_record`),
    or None (never admitted)."""
    admitted = admission_of(obj)
    if admitted is not None:
        return admitted
    try:
        ended = json.loads(_annotations(obj).get(EVICTION) or "null")
    except ValueError:
        return None
    if not isinstance(ended, dict) or not isinstance(ended.get("admission"), dict):
        return None
    return Admitted.from_json(json.dumps(ended["admission"]))


def written_counts(obj: Mapping[str, Any]) -> dict[str, int]:
    """The pod sets' counts its owner wrote, when partial admission runs it with fewer
    (:data:`POD_COUNTS`; empty otherwise)."""
    text = _annotations(obj).get(POD_COUNTS)
    if not text:
        return {}
    try:
        counts = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(counts, dict):
        return {}
    return {str(k): int(v) for k, v in counts.items() if isinstance(v, int)}


def _injected(obj: Mapping[str, Any]) -> Any:
    text = _annotations(obj).get(INJECTED)
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def injected_keys(obj: Mapping[str, Any]) -> list[str]:
    """The node-selector keys the operator added to a pod's own selector when it ungated it."""
    keys = _injected(obj)
    return [str(k) for k in keys] if isinstance(keys, list) else []


def injected_by_podset(obj: Mapping[str, Any]) -> dict[str, list[str]]:
    """The node-selector keys the operator injected into a suspended kind's pod sets at its
    admission, per pod set (:data:`~fleetshare.manifests.kinds.base.Injected`; a list written
    by an earlier operator for the whole object reads as ``"*"``)."""
    keys = _injected(obj)
    if isinstance(keys, list):
        return {"*": [str(k) for k in keys]} if keys else {}
    if isinstance(keys, dict):
        return {
            str(n): [str(k) for k in ks] for n, ks in keys.items() if isinstance(ks, list) and ks
        }
    return {}


def _clean(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy for the manifest parser: the operator's annotations off, status and bookkeeping
    metadata dropped, a pod's scheduling gates and injected node-selector keys off."""
    meta = dict(obj.get("metadata") or {})
    keep = ("name", "namespace", "labels", "annotations", "generateName")
    meta = {k: v for k, v in meta.items() if k in keep}
    meta["annotations"] = {
        k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith(PREFIX)
    }
    data: dict[str, Any] = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": meta,
        "spec": json.loads(json.dumps(obj.get("spec") or {})),
    }
    if obj.get("kind") == "Pod":  # as created: ungated, without the flavor's node selector
        data["spec"].pop("schedulingGates", None)
        selector = data["spec"].get("nodeSelector")
        if isinstance(selector, dict):
            for key in injected_keys(obj):
                selector.pop(key, None)
    return data


@dataclass(frozen=True, slots=True)
class Parsed:
    """A governed object read: its queue, priority class, pod sets and notes."""

    queue: str | None
    queue_field: str
    priority_class: str | None
    priority_field: str
    podsets: tuple[PodSet, ...]
    labels: Mapping[str, str]
    notes: tuple[str, ...]
    priority_source: PrioritySource = "none"


def parse_job(job: Mapping[str, Any], kind: SuspendedKind = JOB) -> Parsed:
    """A Job (or another kind admitted by suspension) as the manifest parser reads it, as its
    owner wrote it: the node-selector keys the operator injected taken off (the kind's
    :meth:`~SuspendedKind.restore_ops`; a requeued job is free to take another flavor), and
    the counts a partial admission lowered given back (:data:`POD_COUNTS`). Raises
    :class:`ManifestError`."""
    restored = apply_ops(job, kind.restore_ops(job, injected_by_podset(job)))
    restored = apply_ops(restored, kind.resize_ops(restored, written_counts(job)))
    return _parsed([_clean(restored)], _where(job))


def parse_pods(pods: Sequence[Mapping[str, Any]]) -> Parsed:
    """A bare pod or every pod of a pod group (raises :class:`ManifestError`)."""
    return _parsed([_clean(p) for p in pods], _where(pods[0]))


def _where(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind')} {meta.get('namespace')}/{meta.get('name')}"


def _parsed(docs: list[dict[str, Any]], where: str) -> Parsed:
    out = parse_manifests([Document(where, d) for d in docs])
    if len(out) != 1:
        raise ManifestError(where, "does not describe one workload")
    mw = out[0]
    return Parsed(
        mw.queue, mw.queue_field, mw.priority_class, mw.priority_field, mw.podsets,
        mw.labels, mw.notes, mw.priority_source,
    )  # fmt: skip


def job_phase(
    job: Mapping[str, Any], kind: SuspendedKind = JOB, pods: Sequence[Mapping[str, Any]] = ()
) -> Phase:
    """Pending (suspended, or not yet suspended by the operator), admitted (running under an
    admission of the operator's), or finished (as the kind says from the object and its
    ``pods``: a Job Complete or Failed, or its pods succeeded; being deleted). The one place
    that decides a workload admitted by suspension is done: a finished one is never admitted
    or counted again."""
    if (job.get("metadata") or {}).get("deletionTimestamp") or kind.finished(job, pods):
        return "finished"
    if not kind.suspended(job) and admission_of(job) is not None:
        return "admitted"
    return "pending"


def job_started(job: Mapping[str, Any]) -> bool:
    """The job controller still counts the job as started (its pod template is immutable until
    it resets ``status.startTime`` after a suspension)."""
    return bool((job.get("status") or {}).get("startTime"))


def suspension_settled(job: Mapping[str, Any]) -> bool:
    """The job controller has carried out the Job's suspension: its ``Suspended`` condition
    is True and no pod is active."""
    status = job.get("status") or {}
    suspended = any(c.get("type") == "Suspended" and c.get("status") == "True"
                    for c in status.get("conditions") or ())  # fmt: skip
    return suspended and not status.get("active")


def pod_gated(pod: Mapping[str, Any]) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or ()
    return any(g.get("name") == GATE for g in gates)


def pod_done(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") in ("Succeeded", "Failed") or bool(
        (pod.get("metadata") or {}).get("deletionTimestamp")
    )


def pods_phase(pods: Sequence[Mapping[str, Any]]) -> Phase:
    """Finished when every pod is done; pending while any pod waits behind the gate; admitted
    when the operator's admission is recorded; otherwise the pods run outside the operator."""
    live = [p for p in pods if not pod_done(p)]
    if not live:
        return "finished"
    if any(pod_gated(p) for p in live):
        return "pending"
    if all(admission_of(p) is not None for p in live):
        return "admitted"
    return "outside"


def group_complete(pods: Sequence[Mapping[str, Any]]) -> bool:
    """All ``pod-group-total-count`` pods of a group exist (Kueue waits for them), or, for a
    group admitted fast (``pod-group-fast-admission``: a StatefulSet's), one does."""
    if pods and all(_annotations(p).get(FAST_ADMISSION) == "true" for p in pods):
        return True
    counts = {_annotations(p).get(POD_GROUP_COUNT) for p in pods}
    if len(counts) != 1:
        return True  # let the parser name the disagreement
    (count,) = counts
    return count is None or not count.isdigit() or len(pods) >= int(count)


def bound_placement(
    pods: Iterable[Mapping[str, Any]], podsets: Sequence[PodSet], pod_podset: Mapping[str, int]
) -> tuple[tuple[tuple[str, int], ...], ...] | None:
    """Where the pods actually run, per pod set, when every live pod is bound (None
    otherwise); ``pod_podset`` maps a pod's name to its pod set's index."""
    per: list[dict[str, int]] = [{} for _ in podsets]
    for pod in pods:
        if pod_done(pod):
            continue
        node = (pod.get("spec") or {}).get("nodeName")
        name = (pod.get("metadata") or {}).get("name", "")
        index = pod_podset.get(name, 0)
        if not node:
            return None
        per[index][node] = per[index].get(node, 0) + 1
    return tuple(tuple(sorted(p.items())) for p in per)


def creation_key(obj: Mapping[str, Any], seen: int = 0) -> tuple[float, int]:
    """Submission order: the creationTimestamp (one-second steps), then ``seen``, the
    order the operator first saw the object in (the watch's, which is the API server's
    order of creation; see ``watch.Store.position``) — never the name or the uid."""
    meta = obj.get("metadata") or {}
    return timestamp(meta.get("creationTimestamp")), seen


# -- disruption budgets ----------------------------------------------------------------------


def pdb_spec(
    pdb: Mapping[str, Any], workload_pods: Mapping[str, Sequence[Mapping[str, Any]]]
) -> PdbSpec | None:
    """A PodDisruptionBudget as the autoscaler's disruption logic reads it: over the workloads
    (of ``workload_pods``) with a pod it selects. None when the decision cannot use it (match
    expressions, a percentage, or no governed pod selected): the API server still enforces it
    when the node is drained."""
    meta, spec = pdb.get("metadata") or {}, pdb.get("spec") or {}
    selector = spec.get("selector") or {}
    if selector.get("matchExpressions"):
        return None
    wanted = selector.get("matchLabels") or {}
    bounds: dict[str, int | None] = {}
    for key, field in (("minAvailable", "min_available"), ("maxUnavailable", "max_unavailable")):
        value = spec.get(key)
        if isinstance(value, str):
            if not value.isdigit():
                return None  # a percentage
            value = int(value)
        bounds[field] = value if isinstance(value, int) else None
    if bounds["min_available"] is None and bounds["max_unavailable"] is None:
        return None
    ns = meta.get("namespace")

    def selects(pod: Mapping[str, Any]) -> bool:
        pmeta = pod.get("metadata") or {}
        labels = pmeta.get("labels") or {}
        return pmeta.get("namespace") == ns and all(labels.get(k) == v for k, v in wanted.items())

    names = [name for name, pods in workload_pods.items() if any(map(selects, pods))]
    if not names:
        return None
    return PdbSpec(name=f"{ns}/{meta.get('name')}", workloads=names, **bounds)
