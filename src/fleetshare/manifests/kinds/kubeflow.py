"""The Kubeflow training jobs (Kueue's ``kubeflowjob``, shared by PyTorchJob, TFJob,
PaddleJob, XGBoostJob, JAXJob; the MPIJob is read alike): one pod set per replica type given,
in the kind's order, named in lower case, of the type's ``replicas`` (default 1); suspended at
``spec.runPolicy.suspend``; finished when its ``Succeeded`` or ``Failed`` condition is True.
The priority class is ``runPolicy.schedulingPolicy.priorityClass``, else the first replica
template's ``priorityClassName`` in that order (Kueue's ``PriorityClass``)."""

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
    true_condition,
)
from fleetshare.manifests.pods import read_template
from fleetshare.manifests.values import Fields, join


class KubeflowJob(SuspendedKind):
    """A Kubeflow job: ``spec.<replica_field>`` maps replica types to replica specs."""

    replica_field: str
    """``pytorchReplicaSpecs``, ``tfReplicaSpecs``, ..."""
    replica_types: tuple[str, ...]
    """The replica types the kind takes, in Kueue's pod-set order."""
    suspend_path: Path = ("spec", "runPolicy", "suspend")

    def __init__(self) -> None:
        types = ", ".join(f"``{t.lower()}``" for t in self.replica_types)
        self.summary = f"{types}: each replica type's ``replicas`` (default 1)"

    def read(self, fields: Fields, doc: dict[str, Any]) -> KindPods:
        spec = spec_of(fields, doc)
        path = join("spec", self.replica_field)
        replicas = fields.mapping(spec.get(self.replica_field), path, required=True)
        for kind in replicas:
            if kind not in self.replica_types:
                raise fields.error(
                    join(path, kind), f"replica types are {_listed(self.replica_types)}"
                )
        if not replicas:
            raise fields.error(path, f"must give {_listed(self.replica_types, 'and/or')}")
        out = []
        for kind in self.replica_types:
            if kind not in replicas:
                continue
            where = join(path, kind)
            replica = fields.mapping(replicas[kind], where, required=True)
            count = fields.whole(replica.get("replicas"), join(where, "replicas"), default=1)
            shape = read_template(fields, replica.get("template"), join(where, "template"))
            out.append(RawPodSet(kind.lower(), count, shape))
        notes = []
        if spec.get("elasticPolicy"):
            notes.append(
                "spec.elasticPolicy: elastic training is not modelled; admitted at replicas"
            )
        run_policy = fields.mapping(spec.get("runPolicy"), "spec.runPolicy")
        scheduling = fields.mapping(
            run_policy.get("schedulingPolicy"), "spec.runPolicy.schedulingPolicy"
        )
        where = "spec.runPolicy.schedulingPolicy.priorityClass"
        priority = fields.text(scheduling.get("priorityClass"), where)
        if set(scheduling) - {"priorityClass"}:
            notes.append(
                "spec.runPolicy.schedulingPolicy: the gang is all pod sets, admitted together "
                "(Kueue's rule); minAvailable, queue and scheduleTimeoutSeconds are not used"
            )
        notes.extend(deadline_notes(run_policy, "spec.runPolicy"))
        return KindPods(tuple(out), tuple(notes), (priority, where) if priority else None)

    def selector_paths(self, obj: Mapping[str, Any]) -> dict[str, Path]:
        specs = get(obj, ("spec", self.replica_field)) or {}
        return {
            k.lower(): ("spec", self.replica_field, k, "template", "spec")
            for k in self.replica_types
            if k in specs
        }

    def finished(self, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
        return true_condition(obj, ("Succeeded", "Failed"))


def _listed(items: Sequence[str], last: str = "and") -> str:
    """``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {last} {items[-1]}"
