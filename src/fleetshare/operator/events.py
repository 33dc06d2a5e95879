"""Kubernetes Events about governed objects (core/v1 Events, as ``kubectl describe`` shows)."""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from typing import Any

from fleetshare.operator.kube import EVENTS, Kube, KubeError

log = logging.getLogger("fleetshare.operator")
COMPONENT = "fleetshare-operator"


Similar = tuple[str, str, str, str]
"""(namespace, involved object's kind, type, reason): Events folded into one when the queue
is full (client-go's EventAggregator keys similar events alike, without the object's name and
the message)."""


class Events:
    """Posts Events; failures are logged, never raised (an Event is a courtesy).

    With ``queue_size`` > 0 they are posted by ``posters`` threads of their own from a queue
    of that size, so a slow or rate-limited Event client never holds an admission back. An
    Event that finds the queue full is not dropped (client-go's broadcaster drops it): it is
    folded into one Event per :data:`Similar` key, posted as soon as the queue has room again,
    with the count of the Events it stands for and the newest one's object and message
    ("(combined from similar events)", as client-go's aggregator says it). A burst of any size
    costs at most one request per key beyond the queue."""

    def __init__(
        self, kube: Kube, identity: str = COMPONENT, *, queue_size: int = 0, posters: int = 4
    ) -> None:
        self.kube = kube
        self.identity = identity
        self.combined = 0
        """Events folded into a combined one because the queue was full."""
        self._folded: dict[Similar, tuple[dict[str, Any], int]] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[dict[str, Any] | None] | None = None
        self._posters = 0
        if queue_size > 0:
            self._queue = queue.Queue(queue_size)
            self._posters = max(1, posters)
            for i in range(self._posters):
                threading.Thread(target=self._drain, name=f"events-{i}", daemon=True).start()

    def _drain(self) -> None:
        events = self._queue
        assert events is not None
        while (body := events.get()) is not None:
            self._send(body)
            if self._folded and events.empty():
                self._send_folded()
        self._send_folded()

    def _send_folded(self) -> None:
        with self._lock:
            folded, self._folded = self._folded, {}
        for body, count in folded.values():
            self._send(combined(body, count))

    def close(self) -> None:
        """Stop the posting threads once what is queued is posted."""
        if self._queue is not None:
            for _ in range(self._posters):
                self._queue.put(None)
            self._queue = None

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
        if self._queue is None:
            self._send(body)
            return
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            key = (namespace, str(obj.get("kind")), kind, reason)
            with self._lock:
                _, count = self._folded.get(key, (body, 0))
                self._folded[key] = (body, count + 1)
                self.combined += 1
            log.debug("event %s on %s folded: the queue is full", reason, meta.get("name"))

    def _send(self, body: dict[str, Any]) -> None:
        try:
            self.kube.create(EVENTS, body, str(body["metadata"]["namespace"]))
        except KubeError as exc:
            name = body["involvedObject"].get("name")
            log.debug("event %s on %s not posted: %s", body["reason"], name, exc)


def combined(body: dict[str, Any], count: int) -> dict[str, Any]:
    """The Event standing for ``count`` similar ones (``body``: the newest of them)."""
    if count <= 1:
        return body
    message = f"(combined from {count} similar events): {body['message']}"
    return {**body, "message": message[:1024], "count": count}


def camel(reason: str) -> str:
    """An Event or condition reason from fleetshare's kebab-case words (``node-failure`` ->
    ``NodeFailure``)."""
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[-_ ]+", reason) if p) or "Unknown"
