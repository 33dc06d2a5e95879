"""``kubeflow.org/v1`` PyTorchJob (Kueue's ``pytorchjob`` integration): replica types Master,
Worker in ``spec.pytorchReplicaSpecs``, read as every Kubeflow job (:mod:`.kubeflow`)."""

from __future__ import annotations

from fleetshare.manifests.kinds.kubeflow import KubeflowJob


class PyTorchJob(KubeflowJob):
    kind = "PyTorchJob"
    api_versions = ("kubeflow.org/v1",)
    plural = "pytorchjobs"
    replica_field = "pytorchReplicaSpecs"
    replica_types = ("Master", "Worker")


PYTORCHJOB = PyTorchJob()
