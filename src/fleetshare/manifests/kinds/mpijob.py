"""``kubeflow.org/v2beta1`` MPIJob (Kueue's ``mpijob`` integration): replica types Launcher,
Worker in ``spec.mpiReplicaSpecs``, read as every Kubeflow job (:mod:`.kubeflow`)."""

from __future__ import annotations

from fleetshare.manifests.kinds.kubeflow import KubeflowJob


class MPIJob(KubeflowJob):
    kind = "MPIJob"
    api_versions = ("kubeflow.org/v2beta1",)
    plural = "mpijobs"
    replica_field = "mpiReplicaSpecs"
    replica_types = ("Launcher", "Worker")


MPIJOB = MPIJob()
