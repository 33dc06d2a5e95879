"""``ray.io/v1`` RayCluster: its cluster spec's pod sets (:mod:`.ray`); suspended at
``spec.suspend``; never finished (it holds its quota until deleted, as in Kueue)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fleetshare.manifests.kinds.base import KindPods, Path, SuspendedKind, spec_of
from fleetshare.manifests.kinds.ray import CLUSTER_SUMMARY, cluster_paths, read_cluster
from fleetshare.manifests.values import Fields


class RayCluster(SuspendedKind):
    kind = "RayCluster"
    api_versions = ("ray.io/v1",)
    plural = "rayclusters"
    summary = CLUSTER_SUMMARY

    def read(self, fields: Fields, doc: dict[str, Any]) -> KindPods:
        return read_cluster(fields, spec_of(fields, doc), "spec")

    def selector_paths(self, obj: Mapping[str, Any]) -> dict[str, Path]:
        return cluster_paths(obj, ("spec",))

    def finished(self, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
        return False


RAYCLUSTER = RayCluster()
