"""``kubeflow.org/v1`` PaddleJob (Kueue's ``paddlejob`` integration): replica types Master,
Worker in ``spec.paddleReplicaSpecs``, read as every Kubeflow job (:mod:`.kubeflow`)."""

from __future__ import annotations

from fleetshare.manifests.kinds.kubeflow import KubeflowJob


class PaddleJob(KubeflowJob):
    kind = "PaddleJob"
    api_versions = ("kubeflow.org/v1",)
    plural = "paddlejobs"
    replica_field = "paddleReplicaSpecs"
    replica_types = ("Master", "Worker")


PADDLEJOB = PaddleJob()
