"""Draining a node through the API server: cordon, ask, evict.

Consolidation removes a node the way ``kubectl drain`` does, with PodDisruptionBudgets as
the API server enforces them: the node is cordoned (``spec.unschedulable``), then every pod
on it is evicted in a dry run (``dryRun=All``) first, so a budget that forbids one eviction
(the API answers 429) stops the whole drain before anything is disrupted: the node is
uncordoned and stays. Only then are the pods evicted for real. A node that goes anyway (a
spot interruption) is drained without the dry run, its protected pods deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from fleetshare.operator.kube import NODES, PODS, Kube, KubeError
from fleetshare.operator.objects import pod_done
from fleetshare.operator.watch import Store

log = logging.getLogger("fleetshare.operator")


def pods_on(store: Store, node: str) -> list[dict[str, Any]]:
    """The pods a drain evicts: bound to ``node``, not finished or already going, and not
    DaemonSet pods (they belong to the node)."""
    out = []
    for pod in store.of("Pod").values():
        meta = pod["metadata"]
        if (pod.get("spec") or {}).get("nodeName") != node or pod_done(pod):
            continue
        if any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or ()):
            continue
        out.append(pod)
    return sorted(out, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))


def cordon(kube: Kube, node: str, on: bool = True) -> None:
    """Mark the node unschedulable (or schedulable again)."""
    kube.patch(NODES, node, {"spec": {"unschedulable": True if on else None}})


def refusal(kube: Kube, pods: Iterable[dict[str, Any]]) -> str | None:
    """Why the API server would refuse to evict one of ``pods`` (a PodDisruptionBudget: the
    dry run's 429), or None when it would evict them all."""
    for pod in pods:
        meta = pod["metadata"]
        try:
            kube.evict(meta["namespace"], meta["name"], dry_run=True)
        except KubeError as exc:
            if exc.status == 429:
                return f"evicting pod {meta['namespace']}/{meta['name']}: {exc.message or exc}"
            if exc.status != 404:
                raise
    return None


def evict_all(kube: Kube, pods: Iterable[dict[str, Any]], *, force: bool = False) -> list[str]:
    """Evict ``pods`` (gone ones are skipped); the messages of those refused. With ``force``
    a pod whose eviction is refused is deleted (its node goes whatever the budget says)."""
    refused = []
    for pod in pods:
        meta = pod["metadata"]
        try:
            kube.evict(meta["namespace"], meta["name"])
        except KubeError as exc:
            if exc.status in (404, 409):
                continue
            if force and exc.status == 429:
                try:
                    kube.delete(PODS, meta["name"], meta["namespace"])
                    continue
                except KubeError as gone:
                    exc = gone
            refused.append(f"pod {meta['namespace']}/{meta['name']}: {exc}")
    return refused
