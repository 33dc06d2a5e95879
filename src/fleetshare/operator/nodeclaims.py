"""NodeClaims: the autoscaler's launches as objects in the API server.

The control loop's :class:`~fleetshare.control.autoscaler.Autoscaler` decides what to launch
and what to remove, and calls the cloud provider; this module keeps one ``NodeClaim``
(Karpenter's shape, group ``fleetshare.io``) per launched instance, so what was bought lives
in the API server:

- a launch creates the claim (``spec.requirements`` and ``spec.taints`` from the pool, the
  node's labels on the claim) with ``status.providerID`` and the ``Launched`` condition;
- the instance's kubelet registers a Node of the claim's name (its ``spec.providerID``, when
  set, must be the claim's): the claim gets ``nodeName`` and ``Registered``; once the Node
  is Ready it gets ``Initialized`` and joins the autoscaler's view (only then may it count as
  empty);
- a claim whose node has not registered within ``registration_timeout`` is deleted and its
  instance terminated (as Karpenter's liveness check does), and so is a claim a user deleted
  or one whose Ready node's Node object was deleted;
- claims the autoscaler does not know (after a restart, or written by a former leader) are
  adopted: their instances are looked up at the cloud by provider id; a claim whose instance
  is gone is deleted.

:func:`claim_object`, :func:`claim_status` and :func:`provider_id` are pure.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from fleetshare.autoscaling.cloud import Instance
from fleetshare.autoscaling.nodepool import counted
from fleetshare.control.autoscaler import Autoscaler, ManagedNode
from fleetshare.control.loop import ControlLoop
from fleetshare.model.catalog import Catalog
from fleetshare.model.node import INSTANCE_TYPE_LABEL, ZONE_LABEL
from fleetshare.model.reason import Reason
from fleetshare.operator.crds import API_VERSION
from fleetshare.operator.events import Events, camel
from fleetshare.operator.kube import NODES, Kube, KubeError, Resource
from fleetshare.operator.objects import node_from_object
from fleetshare.operator.watch import Store

log = logging.getLogger("fleetshare.operator")

NODE_CLAIMS = Resource("NodeClaim", API_VERSION, "nodeclaims", False)
NODE_POOLS = Resource("NodePool", API_VERSION, "nodepools", False)
CAPACITY_TYPE = "karpenter.sh/capacity-type"
POOL = "karpenter.sh/nodepool"
LAUNCHED_FOR = "operator.fleetshare.io/launched-for"
"""Annotation: the pending workloads the claim was launched for (at most 20 named)."""
REGISTRATION_TIMEOUT = "registration-timeout"
CLAIM_DELETED = "claim-deleted"
NODE_DELETED = "node-deleted"
INSTANCE_GONE = "instance-gone"


def provider_id(instance: Instance) -> str:
    """The Node's ``spec.providerID`` for an instance, in the AWS form
    (``aws:///<zone>/<instance id>``; the simulated cloud stands for AWS)."""
    return f"aws:///{instance.zone}/{instance.id}"


def _instance_id(provider: str) -> str:
    return provider.rsplit("/", 1)[-1]


def _amounts(resources: Mapping[str, int]) -> dict[str, str]:
    """Exact quantities (a Node's allocatable is read back from them)."""
    return {k: str(v // 1000) if v % 1000 == 0 else f"{v}m" for k, v in sorted(resources.items())}


def claim_object(managed: ManagedNode) -> dict[str, Any]:
    """The NodeClaim of a launched node (without status)."""
    node, inst = managed.node, managed.instance
    requirements = [
        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [inst.instance_type]},
        {"key": ZONE_LABEL, "operator": "In", "values": [inst.zone]},
        {"key": CAPACITY_TYPE, "operator": "In", "values": [inst.capacity_type]},
        {"key": POOL, "operator": "In", "values": [managed.pool]},
    ]
    taints = [
        {"key": t.key, "effect": t.effect, **({"value": t.value} if t.value else {})}
        for t in node.taints
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": "NodeClaim",
        "metadata": {
            "name": managed.name,
            "labels": dict(node.labels),
            "annotations": {LAUNCHED_FOR: json.dumps(list(managed.for_workloads[:20]))},
        },
        "spec": {
            "requirements": requirements,
            "taints": taints,
            "resources": {"requests": _amounts(node.allocatable)},
        },
    }


def _condition(kind: str, ok: bool, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": "True" if ok else "False", "reason": reason,
            "message": message}  # fmt: skip


def claim_status(
    managed: ManagedNode, node: Mapping[str, Any] | None, ready: bool, catalog: Catalog
) -> dict[str, Any]:
    """The status a claim should show: its capacity (what its pool's limits count,
    :func:`~fleetshare.autoscaling.nodepool.counted`) and allocatable; launched (always,
    once it exists), registered when its Node exists, initialized when that Node is Ready.
    Condition times are added on write."""
    registered = node is not None
    capacity = counted(catalog, managed.instance.instance_type, managed.node.allocatable)
    return {
        "providerID": provider_id(managed.instance),
        "nodeName": str(node["metadata"]["name"]) if node is not None else "",
        "capacity": _amounts(capacity),
        "allocatable": _amounts(managed.node.allocatable),
        "pricePerHour": f"{managed.instance.price_per_hour:.6g}",
        "launchReason": managed.reason[:500],
        "conditions": [
            _condition("Launched", True, "Launched", f"instance {managed.instance.id}"),
            _condition("Registered", registered, "Registered" if registered else "NotRegistered"),
            _condition(
                "Initialized",
                registered and ready,
                "Initialized" if registered and ready else "NotInitialized",
            ),
        ],
    }


def _same_status(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    def gist(status: Mapping[str, Any]) -> Any:
        conditions = [(c.get("type"), c.get("status")) for c in status.get("conditions") or ()]
        return ({k: v for k, v in status.items() if k != "conditions"}, conditions)

    return bool(gist(old) == gist(new))


def _stamp(status: dict[str, Any], old: Mapping[str, Any]) -> dict[str, Any]:
    """Condition transition times: kept from ``old`` while the status stays, else now."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    before = {c.get("type"): c for c in old.get("conditions") or ()}
    for c in status["conditions"]:
        prev = before.get(c["type"])
        same = prev is not None and prev.get("status") == c["status"]
        c["lastTransitionTime"] = prev.get("lastTransitionTime", now) if same and prev else now
    return status


class NodeClaims:
    """Creates, updates and removes the NodeClaims of the autoscaler's nodes."""

    def __init__(
        self,
        kube: Kube,
        store: Store,
        events: Events,
        autoscaler: Autoscaler,
        *,
        registration_timeout: float = 900.0,
        may_act: Callable[[], bool] = lambda: True,
    ) -> None:
        self.kube = kube
        self.store = store
        self.events = events
        self.autoscaler = autoscaler
        self.registration_timeout = registration_timeout
        self.may_act = may_act

    def _claims(self) -> dict[str, dict[str, Any]]:
        return {name: obj for (_, name), obj in self.store.of("NodeClaim").items()}

    def launched(self, name: str) -> None:
        """The autoscaler launched node ``name``: create its claim."""
        managed = self.autoscaler.nodes.get(name)
        if managed is None or not self.may_act():
            return
        try:
            out = self.kube.create(NODE_CLAIMS, claim_object(managed))
            self.store.put("NodeClaim", out)
            self._write_status(managed, out, None, False)
        except KubeError as exc:
            log.warning("claim %s not created (%s): the instance stays tracked", name, exc)

    def _write_status(
        self, managed: ManagedNode, claim: dict[str, Any], node: dict[str, Any] | None,
        ready: bool,
    ) -> None:  # fmt: skip
        old = claim.get("status") or {}
        status = claim_status(managed, node, ready, self.autoscaler.setup.catalog)
        if _same_status(old, status):
            return
        try:
            out = self.kube.patch(NODE_CLAIMS, managed.name, {"status": _stamp(status, old)},
                                  sub="status")  # fmt: skip
            self.store.put("NodeClaim", out)
        except KubeError as exc:
            log.debug("claim %s status not written: %s", managed.name, exc)

    def delete(self, name: str, *, node_too: bool = False) -> None:
        """Delete the claim (and its Node object)."""
        if not self.may_act():
            return
        for res, kind in ((NODE_CLAIMS, "NodeClaim"), *(((NODES, "Node"),) if node_too else ())):
            with contextlib.suppress(KubeError):
                self.kube.delete(res, name)
            self.store.of(kind).pop(("", name), None)

    def sync(self, loop: ControlLoop, now: float) -> bool:
        """Match claims and Nodes (see the module docstring); True when a node joined or
        left the autoscaler's view."""
        if not self.may_act():
            return False
        claims = self._claims()
        nodes = {name: obj for (_, name), obj in self.store.of("Node").items()}
        scaler = self.autoscaler
        changed = False
        if claims.keys() - scaler.nodes.keys():  # written by an operator before this one
            changed = self._adopt(claims, nodes, now)
            claims = self._claims()
        for managed in list(scaler.live()):
            name = managed.name
            claim = claims.get(name)
            if claim is None:  # deleted by someone: terminate, as Karpenter does
                why = "it has no NodeClaim (deleted, or never written)"
                self._gone(loop, managed, now, CLAIM_DELETED, why)
                self.delete(name, node_too=True)
                changed = True
                continue
            node = nodes.get(name)
            if node is not None and not _ours(node, managed):
                node = None  # a Node of that name from another instance
            if node is None and managed.joined:  # its Node was deleted: the instance goes
                self._gone(loop, managed, now, NODE_DELETED, "its Node was deleted")
                self.delete(name)
                changed = True
                continue
            if node is None and now - managed.instance.launched_at > self.registration_timeout:
                why = f"its node did not register within {self.registration_timeout:g} s"
                self._gone(loop, managed, now, REGISTRATION_TIMEOUT, why)
                self.delete(name)
                changed = True
                continue
            ready = node is not None and _ready(node)
            if ready and not managed.joined:  # it joins the autoscaler's view once Ready
                if not loop.node_ready(name):
                    self.delete(name, node_too=True)
                    continue
                changed = True
                log.info("node %s of claim %s is Ready", name, name)
            self._write_status(managed, claim, node, ready)
        for name in claims.keys() - {m.name for m in scaler.live()}:
            if name in scaler.nodes:  # terminated by the autoscaler: the claim goes too
                self.delete(name, node_too=True)
        return changed

    def _gone(self, loop: ControlLoop, managed: ManagedNode, now: float, category: str,
              why: str) -> None:  # fmt: skip
        log.warning("node claim %s removed: %s", managed.name, why)
        claim = self._claims().get(managed.name) or claim_object(managed)
        self.events.post(claim, "Warning", camel(category), f"{managed.name}: {why}")
        loop.node_gone(managed.name, now, Reason(category, why))

    def _adopt(self, claims: Mapping[str, Any], nodes: Mapping[str, Any], now: float) -> bool:
        """Claims written by an operator before this one (a restart, a former leader): take
        their live instances over; delete those whose instance is gone, and terminate those
        of a pool that no longer exists."""
        scaler = self.autoscaler
        instances = {i.id: i for i in scaler.cloud.instances(now)}
        adopted = False
        for name, claim in sorted(claims.items()):
            if name in scaler.nodes:
                continue
            status = claim.get("status") or {}
            instance = instances.get(_instance_id(str(status.get("providerID") or "")))
            reason = str(status.get("launchReason") or "adopted after a restart")
            node = nodes.get(name)
            joined = node is not None and _ready(node)
            if instance is None:
                log.warning("claim %s has no live instance: deleted", name)
            elif scaler.adopt(name, instance, reason, joined=joined):
                adopted = True
                continue
            else:  # its pool is gone (or the name is taken): nobody would ever remove it
                log.warning("claim %s of an unknown pool %s: terminated", name, instance.pool)
                scaler.cloud.terminate([instance.id], now)
            self.delete(name, node_too=True)
        return adopted


def _ours(node: Mapping[str, Any], managed: ManagedNode) -> bool:
    given = (node.get("spec") or {}).get("providerID")
    return not given or given == provider_id(managed.instance)


def _ready(node: Mapping[str, Any]) -> bool:
    return node_from_object(node).ready
