"""Pod sets of each supported kind, counted as Kueue counts them.

=============================  ==============================================================
kind (apiVersion)              pod sets
=============================  ==============================================================
Job (batch/v1)                 ``main``: ``parallelism`` pods (default 1), ``min(parallelism,
                               completions)`` when ``completions`` is set
PyTorchJob (kubeflow.org/v1)   ``master``, ``worker``: each replica type's ``replicas``
                               (default 1)
JobSet (jobset.x-k8s.io/       one per replicated job: ``replicas`` (default 1) x the job's
v1alpha2)                      pods (as for a Job)
RayCluster (ray.io/v1)         ``head``: 1; one per worker group: ``replicas`` (else
                               ``minReplicas``, default 0) kept within ``minReplicas`` and
                               ``maxReplicas``, times ``numOfHosts`` (default 1)
RayJob (ray.io/v1)             its ``rayClusterSpec``, as a RayCluster
Pod (v1)                       ``main``: 1 (pod groups are assembled in :mod:`.parse`)
=============================  ==============================================================

A pod set of zero pods (a worker group scaled to zero) requests nothing and is left out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleetshare.manifests.pods import PodShape, read_pod_spec, read_template
from fleetshare.manifests.values import Fields, join


@dataclass(frozen=True, slots=True)
class RawPodSet:
    """``count`` pods of one shape, before they become a model ``PodSet``."""

    name: str
    count: int
    shape: PodShape


@dataclass(frozen=True, slots=True)
class KindPods:
    """A kind's pod sets and the notes on what was not modelled."""

    podsets: tuple[RawPodSet, ...]
    notes: tuple[str, ...] = ()


Reader = Callable[[Fields, dict[str, Any]], KindPods]


def _spec(fields: Fields, doc: dict[str, Any]) -> dict[str, Any]:
    return fields.mapping(doc.get("spec"), "spec", required=True)


def job_pods(fields: Fields, spec: dict[str, Any], path: str) -> int:
    """Pods a Job spec at ``path`` runs at once: parallelism, capped by completions."""
    parallelism = fields.whole(spec.get("parallelism"), join(path, "parallelism"), default=1)
    completions = spec.get("completions")
    pods = parallelism
    if completions is not None:
        pods = min(pods, fields.whole(completions, join(path, "completions"), default=1))
    if pods == 0:
        what = "parallelism" if parallelism == 0 else "completions"
        raise fields.error(join(path, what), "is 0: the job runs no pods")
    return pods


def _job_notes(spec: dict[str, Any], path: str) -> list[str]:
    if spec.get("activeDeadlineSeconds") is not None:
        return [
            f"{join(path, 'activeDeadlineSeconds')}: not applied; the run time is the "
            "fleetshare.io/duration annotation or the scenario's duration"
        ]
    return []


def _job(fields: Fields, doc: dict[str, Any]) -> KindPods:
    spec = _spec(fields, doc)
    pods = job_pods(fields, spec, "spec")
    shape = read_template(fields, spec.get("template"), "spec.template")
    return KindPods((RawPodSet("main", pods, shape),), tuple(_job_notes(spec, "spec")))


def _pod(fields: Fields, doc: dict[str, Any]) -> KindPods:
    return KindPods((RawPodSet("main", 1, read_pod_spec(fields, doc.get("spec"), "spec")),))


_PYTORCH_TYPES = ("Master", "Worker")


def _pytorchjob(fields: Fields, doc: dict[str, Any]) -> KindPods:
    spec = _spec(fields, doc)
    path = "spec.pytorchReplicaSpecs"
    replicas = fields.mapping(spec.get("pytorchReplicaSpecs"), path, required=True)
    for kind in replicas:
        if kind not in _PYTORCH_TYPES:
            raise fields.error(join(path, kind), "replica types are Master and Worker")
    if not replicas:
        raise fields.error(path, "must give Master and/or Worker")
    out = []
    for kind in _PYTORCH_TYPES:
        if kind not in replicas:
            continue
        where = join(path, kind)
        replica = fields.mapping(replicas[kind], where, required=True)
        count = fields.whole(replica.get("replicas"), join(where, "replicas"), default=1)
        shape = read_template(fields, replica.get("template"), join(where, "template"))
        out.append(RawPodSet(kind.lower(), count, shape))
    notes = []
    if spec.get("elasticPolicy"):
        notes.append("spec.elasticPolicy: elastic training is not modelled; admitted at replicas")
    run_policy = fields.mapping(spec.get("runPolicy"), "spec.runPolicy")
    if run_policy.get("schedulingPolicy"):
        notes.append(
            "spec.runPolicy.schedulingPolicy: the gang is all pod sets, admitted together "
            "(Kueue's rule); minAvailable, queue and priorityClass here are not used"
        )
    if run_policy.get("activeDeadlineSeconds") is not None:
        notes.extend(_job_notes(run_policy, "spec.runPolicy"))
    return KindPods(tuple(out), tuple(notes))


def _jobset(fields: Fields, doc: dict[str, Any]) -> KindPods:
    spec = _spec(fields, doc)
    path = "spec.replicatedJobs"
    jobs = fields.items(spec.get("replicatedJobs"), path, required=True)
    if not jobs:
        raise fields.error(path, "must list at least one replicated job")
    out, notes, seen = [], [], set()
    for i, item in enumerate(jobs):
        where = join(path, i)
        job = fields.mapping(item, where, required=True)
        name = fields.text(job.get("name"), join(where, "name"), required=True)
        assert name is not None
        if name in seen:
            raise fields.error(join(where, "name"), f"repeats {name!r}")
        seen.add(name)
        replicas = fields.whole(job.get("replicas"), join(where, "replicas"), default=1)
        template = fields.mapping(job.get("template"), join(where, "template"), required=True)
        job_spec = fields.mapping(template.get("spec"), join(where, "template.spec"), required=True)
        pods = job_pods(fields, job_spec, join(where, "template.spec"))
        shape = read_template(
            fields, job_spec.get("template"), join(where, "template.spec.template")
        )
        out.append(RawPodSet(name, replicas * pods, shape))
        notes.extend(_job_notes(job_spec, join(where, "template.spec")))
    return KindPods(tuple(out), tuple(notes))


def _ray_cluster(fields: Fields, spec: dict[str, Any], path: str) -> KindPods:
    head_path = join(path, "headGroupSpec")
    head = fields.mapping(spec.get("headGroupSpec"), head_path, required=True)
    out = [
        RawPodSet(
            "head", 1, read_template(fields, head.get("template"), join(head_path, "template"))
        )
    ]
    groups_path = join(path, "workerGroupSpecs")
    seen = set()
    for i, item in enumerate(fields.items(spec.get("workerGroupSpecs"), groups_path)):
        where = join(groups_path, i)
        group = fields.mapping(item, where, required=True)
        name = fields.text(group.get("groupName"), join(where, "groupName"), required=True)
        assert name is not None
        if name in seen or name == "head":
            raise fields.error(join(where, "groupName"), f"repeats {name!r}")
        seen.add(name)
        low = fields.whole(group.get("minReplicas"), join(where, "minReplicas"), default=0)
        high = group.get("maxReplicas")
        if high is not None:
            high = fields.whole(high, join(where, "maxReplicas"), default=0)
            if low > high:
                raise fields.error(join(where, "minReplicas"), f"{low} is above maxReplicas {high}")
        count = fields.whole(group.get("replicas"), join(where, "replicas"), default=low)
        count = max(count, low) if high is None else min(max(count, low), high)
        hosts = fields.whole(
            group.get("numOfHosts"), join(where, "numOfHosts"), default=1, minimum=1
        )
        if group.get("suspend") is True:
            raise fields.error(join(where, "suspend"), "suspended worker groups are not supported")
        shape = read_template(fields, group.get("template"), join(where, "template"))
        out.append(RawPodSet(name, count * hosts, shape))
    notes = []
    if spec.get("enableInTreeAutoscaling"):
        notes.append(
            f"{join(path, 'enableInTreeAutoscaling')}: Ray autoscaling is not simulated; the "
            "cluster is admitted at its replicas"
        )
    return KindPods(tuple(out), tuple(notes))


def _raycluster(fields: Fields, doc: dict[str, Any]) -> KindPods:
    return _ray_cluster(fields, _spec(fields, doc), "spec")


def _rayjob(fields: Fields, doc: dict[str, Any]) -> KindPods:
    spec = _spec(fields, doc)
    if spec.get("rayClusterSpec") is None:
        if spec.get("clusterSelector"):
            raise fields.error(
                "spec.clusterSelector",
                "a RayJob on an existing RayCluster is not queued by Kueue (the cluster is); "
                "give rayClusterSpec",
            )
        raise fields.error("spec.rayClusterSpec", "is required")
    cluster = fields.mapping(spec.get("rayClusterSpec"), "spec.rayClusterSpec", required=True)
    pods = _ray_cluster(fields, cluster, "spec.rayClusterSpec")
    mode = fields.text(spec.get("submissionMode"), "spec.submissionMode") or "K8sJobMode"
    notes = list(pods.notes)
    if mode == "K8sJobMode":
        notes.append(
            "spec.submissionMode: the submitter pod (K8sJobMode) is not counted; only the "
            "Ray cluster's pods are"
        )
    if spec.get("activeDeadlineSeconds") is not None:
        notes.extend(_job_notes(spec, "spec"))
    return KindPods(pods.podsets, tuple(notes))


@dataclass(frozen=True, slots=True)
class Kind:
    """A supported kind: the apiVersions accepted and how its pod sets are read."""

    api_versions: tuple[str, ...]
    read: Reader


KINDS: dict[str, Kind] = {
    "Job": Kind(("batch/v1",), _job),
    "PyTorchJob": Kind(("kubeflow.org/v1",), _pytorchjob),
    "JobSet": Kind(("jobset.x-k8s.io/v1alpha2",), _jobset),
    "RayCluster": Kind(("ray.io/v1",), _raycluster),
    "RayJob": Kind(("ray.io/v1",), _rayjob),
    "Pod": Kind(("v1",), _pod),
}

UNSUPPORTED: dict[str, str] = {
    "Deployment": "a serving workload with no end; Kueue queues its pods one by one through "
    "the pod integration, which fleetshare does not model",
    "StatefulSet": "a serving workload with no end; Kueue queues it as a pod group that keeps "
    "running, which fleetshare does not model",
    "ReplicaSet": "a serving workload with no end; not supported as a workload",
    "DaemonSet": "runs one pod per node outside any queue; not a workload",
    "CronJob": "creates Jobs on a schedule; give the Jobs it creates, each with its submit time",
    "MPIJob": "Kubeflow MPIJobs are not supported yet; a PyTorchJob or a JobSet can express "
    "the same launcher + workers gang",
    "TFJob": "Kubeflow TFJobs are not supported yet",
    "PaddleJob": "Kubeflow PaddleJobs are not supported yet",
    "XGBoostJob": "Kubeflow XGBoostJobs are not supported yet",
    "JAXJob": "Kubeflow JAXJobs are not supported yet",
    "MXJob": "Kubeflow MXJobs are not supported",
    "TrainJob": "Kubeflow Trainer TrainJobs are not supported yet",
    "RayService": "a serving workload with no end; not supported as a workload",
    "LeaderWorkerSet": "a serving workload with no end; not supported as a workload",
    "AppWrapper": "AppWrappers are not supported; give the objects they wrap",
    "SparkApplication": "Spark applications are not supported yet",
    "Workload": "Kueue Workload objects are Kueue's own record of a job; give the job itself",
    "ClusterQueue": "a Kueue policy object: it belongs under kueue:, not manifests:",
    "LocalQueue": "a Kueue policy object: it belongs under kueue:, not manifests:",
    "ResourceFlavor": "a Kueue policy object: it belongs under kueue:, not manifests:",
    "Cohort": "a Kueue policy object: it belongs under kueue:, not manifests:",
    "WorkloadPriorityClass": "a Kueue policy object: it belongs under kueue:, not manifests:",
}
"""Kinds people may bring that are not workloads here, with the reason given."""
