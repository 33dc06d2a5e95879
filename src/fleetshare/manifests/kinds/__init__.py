"""The workload kinds fleetshare governs, one module per kind, each as Kueue admits it (the
interface: :mod:`.base`). The manifest reader, the operator (its watches, admissions,
webhook) and the Helm chart's webhook rules and RBAC all take the kinds from :data:`KINDS`.

A pod set of zero pods (a worker group scaled to zero) requests nothing and is left out.
"""

from __future__ import annotations

from fleetshare.manifests.kinds.appwrapper import APPWRAPPER
from fleetshare.manifests.kinds.base import (
    Expansion,
    KindPods,
    PodGroupKind,
    PodKind,
    PodSetKind,
    RawPodSet,
    SuspendedKind,
    WorkloadKind,
)
from fleetshare.manifests.kinds.cronjob import CRONJOB
from fleetshare.manifests.kinds.deployment import DEPLOYMENT
from fleetshare.manifests.kinds.jaxjob import JAXJOB
from fleetshare.manifests.kinds.job import JOB
from fleetshare.manifests.kinds.jobset import JOBSET
from fleetshare.manifests.kinds.leaderworkerset import LEADERWORKERSET
from fleetshare.manifests.kinds.mpijob import MPIJOB
from fleetshare.manifests.kinds.paddlejob import PADDLEJOB
from fleetshare.manifests.kinds.pod import POD
from fleetshare.manifests.kinds.pytorchjob import PYTORCHJOB
from fleetshare.manifests.kinds.raycluster import RAYCLUSTER
from fleetshare.manifests.kinds.rayjob import RAYJOB
from fleetshare.manifests.kinds.rayservice import RAYSERVICE
from fleetshare.manifests.kinds.sparkapplication import SPARKAPPLICATION
from fleetshare.manifests.kinds.statefulset import STATEFULSET
from fleetshare.manifests.kinds.tfjob import TFJOB
from fleetshare.manifests.kinds.xgboostjob import XGBOOSTJOB

KINDS: dict[str, WorkloadKind] = {
    k.kind: k
    for k in (
        JOB, JOBSET, PYTORCHJOB, TFJOB, PADDLEJOB, XGBOOSTJOB, JAXJOB, MPIJOB, RAYCLUSTER,
        RAYJOB, RAYSERVICE, APPWRAPPER, SPARKAPPLICATION, POD, DEPLOYMENT, STATEFULSET,
        LEADERWORKERSET, CRONJOB,
    )
}  # fmt: skip
"""Every kind, by name, in the order the documentation and the webhook rules list them."""
SUSPENDED: dict[str, SuspendedKind] = {
    k.kind: k for k in KINDS.values() if isinstance(k, SuspendedKind)
}
"""The kinds admitted by suspension (the object is the workload)."""
POD_GROUPS: dict[str, PodGroupKind] = {
    k.kind: k for k in KINDS.values() if isinstance(k, PodGroupKind)
}
"""The kinds queued through the pods or Jobs they create."""

UNSUPPORTED: dict[str, str] = {
    "ReplicaSet": "Kueue queues a Deployment's pods, not a bare ReplicaSet's; give the Deployment",
    "DaemonSet": "runs one pod per node outside any queue; not a workload",
    "MXJob": "Kubeflow MXJobs are not supported (the training operator dropped them)",
    "TrainJob": "Kubeflow Trainer TrainJobs are not supported yet (their pods come from a "
    "runtime object fleetshare does not read)",
    "Workload": "Kueue Workload objects are Kueue's own record of a job; give the job itself",
    "ClusterQueue": "a Kueue policy object: it belongs under kueue:, not manifests:",
    "LocalQueue": "a Kueue policy object: it belongs under kueue:, not manifests:",
    "ResourceFlavor": "a Kueue policy object: it belongs under kueue:, not manifests:",
    "Cohort": "a Kueue policy object: it belongs under kueue:, not manifests:",
    "WorkloadPriorityClass": "a Kueue policy object: it belongs under kueue:, not manifests:",
}
"""Kinds people may bring that are not workloads here, with the reason given."""

__all__ = [
    "KINDS",
    "POD_GROUPS",
    "SUSPENDED",
    "UNSUPPORTED",
    "Expansion",
    "KindPods",
    "PodGroupKind",
    "PodKind",
    "PodSetKind",
    "RawPodSet",
    "SuspendedKind",
    "WorkloadKind",
]
