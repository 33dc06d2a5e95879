"""``ray.io/v1`` RayJob: the pod sets of its ``spec.rayClusterSpec`` (:mod:`.ray`) and, in
``submissionMode: K8sJobMode`` (the default), the ``submitter`` pod set: 1 pod of
``spec.submitterPodTemplate``, else of KubeRay's default submitter (500m CPU and 200Mi of
memory requested), as Kueue counts it; suspended at ``spec.suspend``; finished when its
``jobDeploymentStatus`` is Complete or Failed. A RayJob on an existing cluster
(``clusterSelector``) is not queued by Kueue (the cluster is)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fleetshare.manifests.kinds.base import (
    KindPods,
    Path,
    RawPodSet,
    SuspendedKind,
    deadline_notes,
    get,
    spec_of,
)
from fleetshare.manifests.kinds.ray import CLUSTER_SUMMARY, cluster_paths, read_cluster
from fleetshare.manifests.pods import read_pod_spec, read_template
from fleetshare.manifests.values import Fields

SUBMITTER = "submitter"
SUBMITTER_MODE = "K8sJobMode"
DEFAULT_SUBMITTER = {
    "restartPolicy": "Never",
    "containers": [{
        "name": "ray-job-submitter",
        "resources": {"requests": {"cpu": "500m", "memory": "200Mi"},
                      "limits": {"cpu": "1", "memory": "1Gi"}},
    }],
}  # fmt: skip
"""KubeRay's default submitter pod, which Kueue counts when no template is given."""


def submission_mode(obj: Mapping[str, Any]) -> str:
    """``spec.submissionMode`` (KubeRay's CRD defaults it to K8sJobMode)."""
    return str(get(obj, ("spec", "submissionMode")) or SUBMITTER_MODE)


class RayJob(SuspendedKind):
    kind = "RayJob"
    api_versions = ("ray.io/v1",)
    plural = "rayjobs"
    summary = (
        f"its ``rayClusterSpec``, as a RayCluster ({CLUSTER_SUMMARY}); ``submitter``: 1 "
        "(``submissionMode: K8sJobMode``, the default: ``submitterPodTemplate``, else 500m CPU "
        "and 200Mi)"
    )

    def read(self, fields: Fields, doc: dict[str, Any]) -> KindPods:
        spec = spec_of(fields, doc)
        if spec.get("rayClusterSpec") is None:
            if spec.get("clusterSelector"):
                raise fields.error(
                    "spec.clusterSelector",
                    "a RayJob on an existing RayCluster is not queued by Kueue (the cluster "
                    "is); give rayClusterSpec",
                )
            raise fields.error("spec.rayClusterSpec", "is required")
        path = "spec.rayClusterSpec"
        cluster = fields.mapping(spec.get("rayClusterSpec"), path, required=True)
        pods = read_cluster(fields, cluster, path)
        fields.text(spec.get("submissionMode"), "spec.submissionMode")
        podsets = list(pods.podsets)
        if submission_mode(doc) == SUBMITTER_MODE:
            template = spec.get("submitterPodTemplate")
            shape = (
                read_template(fields, template, "spec.submitterPodTemplate")
                if template is not None
                else read_pod_spec(fields, DEFAULT_SUBMITTER, "KubeRay's default submitter")
            )
            podsets.append(RawPodSet(SUBMITTER, 1, shape))
        return KindPods(tuple(podsets), (*pods.notes, *deadline_notes(spec, "spec")))

    def selector_paths(self, obj: Mapping[str, Any]) -> dict[str, Path]:
        """The Ray cluster's templates and the submitter's when one is given (KubeRay's default
        submitter has no template to inject into, in Kueue too)."""
        out = cluster_paths(obj, ("spec", "rayClusterSpec"))
        template = ("spec", "submitterPodTemplate")
        if submission_mode(obj) == SUBMITTER_MODE and isinstance(get(obj, template), Mapping):
            out[SUBMITTER] = (*template, "spec")
        return out

    def finished(self, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
        status = (obj.get("status") or {}).get("jobDeploymentStatus")
        return status in ("Complete", "Failed")


RAYJOB = RayJob()
