"""``kubeflow.org/v1`` JAXJob (Kueue's ``jaxjob`` integration): replica type Worker in
``spec.jaxReplicaSpecs``, read as every Kubeflow job (:mod:`.kubeflow`)."""

from __future__ import annotations

from fleetshare.manifests.kinds.kubeflow import KubeflowJob


class JAXJob(KubeflowJob):
    kind = "JAXJob"
    api_versions = ("kubeflow.org/v1",)
    plural = "jaxjobs"
    replica_field = "jaxReplicaSpecs"
    replica_types = ("Worker",)


JAXJOB = JAXJob()
