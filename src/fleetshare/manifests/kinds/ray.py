"""A Ray cluster spec (``ray.io/v1``) as pod sets, shared by the RayCluster, the RayJob and
the RayService (Kueue's ``raycluster.BuildPodSets``): ``head``, 1 pod; one per worker group,
``replicas`` (else ``minReplicas``, default 0) kept within ``minReplicas`` and ``maxReplicas``,
times ``numOfHosts`` (default 1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetshare.manifests.kinds.base import KindPods, Path, RawPodSet, get
from fleetshare.manifests.pods import read_template
from fleetshare.manifests.values import Fields, join

CLUSTER_SUMMARY = (
    "``head``: 1; one per worker group: ``replicas`` (else ``minReplicas``, default 0) kept "
    "within ``minReplicas`` and ``maxReplicas``, times ``numOfHosts`` (default 1)"
)


def read_cluster(fields: Fields, spec: Mapping[str, Any], path: str) -> KindPods:
    """The pod sets of the Ray cluster spec at ``path``."""
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
        if name in seen or name in ("head", "submitter"):
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


def cluster_paths(obj: Mapping[str, Any], base: Path) -> dict[str, Path]:
    """Pod-set name -> pod spec path, for the Ray cluster spec at ``base``."""
    out: dict[str, Path] = {"head": (*base, "headGroupSpec", "template", "spec")}
    for i, group in enumerate(get(obj, (*base, "workerGroupSpecs")) or ()):
        if isinstance(group, Mapping) and group.get("groupName"):
            out[str(group["groupName"])] = (*base, "workerGroupSpecs", i, "template", "spec")
    return out
