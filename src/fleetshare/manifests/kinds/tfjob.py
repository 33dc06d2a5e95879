"""``kubeflow.org/v1`` TFJob (Kueue's ``tfjob`` integration): replica types Chief, Master, PS,
Worker, Evaluator in ``spec.tfReplicaSpecs``, read as every Kubeflow job (:mod:`.kubeflow`)."""

from __future__ import annotations

from fleetshare.manifests.kinds.kubeflow import KubeflowJob


class TFJob(KubeflowJob):
    kind = "TFJob"
    api_versions = ("kubeflow.org/v1",)
    plural = "tfjobs"
    replica_field = "tfReplicaSpecs"
    replica_types = ("Chief", "Master", "PS", "Worker", "Evaluator")


TFJOB = TFJob()
