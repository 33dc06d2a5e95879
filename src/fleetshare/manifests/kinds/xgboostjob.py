"""``kubeflow.org/v1`` XGBoostJob (Kueue's ``xgboostjob`` integration): replica types Master,
Worker in ``spec.xgbReplicaSpecs``, read as every Kubeflow job (:mod:`.kubeflow`)."""

from __future__ import annotations

from fleetshare.manifests.kinds.kubeflow import KubeflowJob


class XGBoostJob(KubeflowJob):
    kind = "XGBoostJob"
    api_versions = ("kubeflow.org/v1",)
    plural = "xgboostjobs"
    replica_field = "xgbReplicaSpecs"
    replica_types = ("Master", "Worker")


XGBOOSTJOB = XGBoostJob()
