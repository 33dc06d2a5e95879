"""Kubernetes Events about governed objects (core/v1 Events, as ``kubectl describe`` shows)."""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from fleetshare.operator.kube import EVENTS, Kube, KubeError

log = logging.getLogger("fleetshare.operator")
COMPONENT = "fleetshare-operator"


class Events:
    """Posts Events; failures are logged, never raised (an Event is a courtesy)."""

    def __init__(self, kube: Kube, identity: str = COMPONENT) -> None:
        self.kube = kube
        self.identity = identity

    def post(self, obj: dict[str, Any], kind: str, reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'object')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.identity,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.kube.create(EVENTS, body, namespace)
        except KubeError as exc:
            log.debug("event %s on %s not posted: %s", reason, meta.get("name"), exc)


def camel(reason: str) -> str:
    """An Event or condition reason from fleetshare's kebab-case words (``node-failure`` ->
    ``NodeFailure``)."""
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[-_ ]+", reason) if p) or "Unknown"
