"""``ray.io/v1`` RayService: the pod sets of its ``spec.rayClusterConfig`` (:mod:`.ray`), as
Kueue manages it since v0.17 (a top-level job, as a RayJob; before, through the RayCluster
made for it); suspended at ``spec.rayClusterConfig.suspend``; never finished (a service runs
until deleted). The RayCluster it creates is its own (owned), not queued apart."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fleetshare.manifests.kinds.base import KindPods, Path, SuspendedKind, spec_of
from fleetshare.manifests.kinds.ray import CLUSTER_SUMMARY, cluster_paths, read_cluster
from fleetshare.manifests.values import Fields


class RayService(SuspendedKind):
    kind = "RayService"
    api_versions = ("ray.io/v1",)
    plural = "rayservices"
    suspend_path: Path = ("spec", "rayClusterConfig", "suspend")
    summary = f"its ``rayClusterConfig``, as a RayCluster ({CLUSTER_SUMMARY})"

    def read(self, fields: Fields, doc: dict[str, Any]) -> KindPods:
        spec = spec_of(fields, doc)
        path = "spec.rayClusterConfig"
        cluster = fields.mapping(spec.get("rayClusterConfig"), path, required=True)
        return read_cluster(fields, cluster, path)

    def selector_paths(self, obj: Mapping[str, Any]) -> dict[str, Path]:
        return cluster_paths(obj, ("spec", "rayClusterConfig"))

    def finished(self, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
        return False


RAYSERVICE = RayService()
