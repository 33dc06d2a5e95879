"""List and watch: one thread per kind keeps a copy of its objects current.

Each :class:`Watcher` lists its kind (the list's resourceVersion), then watches from there,
and posts what it sees to one queue the operator's loop drains: ``("sync", kind, objects)``
after a list, ``("event", kind, (type, object))`` per change. A watch that ends is resumed
from the last resourceVersion seen (bookmarks included); one the server no longer serves
(410 Gone) or any error starts over with a fresh list after a short pause. The loop applies
it all to a :class:`Store`, the only place objects are kept: the operator's state is what the
API server says, nothing else.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from fleetshare.operator.kube import Kube, KubeError, Resource

log = logging.getLogger("fleetshare.operator")

Key = tuple[str, str]
"""(namespace, name); namespace "" for cluster-scoped objects."""


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name"))


def _uid(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _listed_order(obj: dict[str, Any]) -> tuple[str, int]:
    """Creation order as an object read from a list shows it: its creationTimestamp (RFC
    3339, one-second steps), then its resourceVersion (its creation's, until it changes)."""
    meta = obj.get("metadata") or {}
    return str(meta.get("creationTimestamp") or ""), _version(obj) or 0


def _version(obj: dict[str, Any]) -> int | None:
    text = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return None


class Store:
    """The latest copy of each watched object, per kind, and which objects changed since a
    reader last asked (:meth:`take_changes`: the operator's incremental view)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[Key, dict[str, Any]]] = {}
        self.synced: set[str] = set()
        self.changes: dict[tuple[str, Key], None] = {}
        """(kind, key) of each object put or removed since :meth:`take_changes`, in the
        order they first changed."""
        self.position: dict[tuple[str, Key], int] = {}
        """When each kept object was first put (its place in :meth:`of`'s order)."""
        self._next = 0

    def of(self, kind: str) -> dict[Key, dict[str, Any]]:
        return self.objects.setdefault(kind, {})

    def take_changes(self) -> list[tuple[str, Key]]:
        """The objects that changed since the last call, in the order they first changed."""
        changes, self.changes = self.changes, {}
        return list(changes)

    def _touch(self, kind: str, key: Key, present: bool) -> None:
        self.changes[(kind, key)] = None
        if not present:
            self.position.pop((kind, key), None)
        elif (kind, key) not in self.position:
            self._next += 1
            self.position[(kind, key)] = self._next

    def replace(self, kind: str, items: Iterable[dict[str, Any]]) -> None:
        self.resync(kind, None, items)
        self.synced.add(kind)

    def resync(self, kind: str, namespace: str | None, items: Iterable[dict[str, Any]]) -> None:
        """A fresh list of ``kind`` (in ``namespace``; None: all): what it lacks is gone.

        Objects kept keep their place in :meth:`of`'s order; new ones are placed in order of
        creation as far as the list tells it (creationTimestamp, then resourceVersion: the
        list itself comes in name order, and names must never order work)."""
        objects = self.of(kind)
        fresh = {key_of(item): item for item in items}
        for key in [k for k in objects if namespace is None or k[0] == namespace]:
            if key not in fresh or _uid(fresh[key]) != _uid(objects[key]):
                del objects[key]
                self._touch(kind, key, False)
        for item in sorted(fresh.values(), key=_listed_order):
            self.put(kind, item)

    def put(self, kind: str, obj: dict[str, Any]) -> bool:
        """Keep ``obj`` unless a newer version is already kept (the operator's own writes
        are put as soon as the API answers, before their watch events arrive). True when it
        was kept."""
        objects = self.of(kind)
        key = key_of(obj)
        old = objects.get(key)
        if old is not None:
            new_v, old_v = _version(obj), _version(old)
            if new_v is not None and old_v is not None and new_v < old_v:
                return False
        objects[key] = obj
        self._touch(kind, key, True)
        return True

    def remove(self, kind: str, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        if self.of(kind).pop(key, None) is not None:
            self._touch(kind, key, False)

    def apply(self, kind: str, event_type: str, obj: dict[str, Any]) -> bool:
        """One watch event; True when something changed."""
        if event_type == "DELETED":
            self.remove(kind, obj)
            return True
        if event_type in ("ADDED", "MODIFIED"):
            return self.put(kind, obj)
        return False


class Watcher(threading.Thread):
    """List-then-watch of one kind, posting to ``out``."""

    def __init__(
        self,
        kube: Kube,
        res: Resource,
        out: queue.Queue[tuple[str, str, Any]],
        stop: threading.Event,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> None:
        super().__init__(name=f"watch-{res.plural}", daemon=True)
        self.kube = kube
        self.res = res
        self.out = out
        self.stop_event = stop
        self.namespace = namespace
        self.label_selector = label_selector
        self.kind = res.kind if namespace is None else f"{res.kind}@{namespace}"

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                query = {"labelSelector": self.label_selector} if self.label_selector else {}
                items, version = self.kube.list(self.res, self.namespace, **query)
                self.out.put(("sync", self.res.kind, (self.namespace, items)))
                self._watch(version)
            except KubeError as exc:
                if self.stop_event.is_set():
                    return
                if exc.status == 404:  # the kind is not served (a CRD not installed yet)
                    self.out.put(("sync", self.res.kind, (self.namespace, [])))
                elif exc.status != 410:
                    log.warning("watch %s: %s", self.res.plural, exc)
            except Exception as exc:  # a broken connection: start over
                if self.stop_event.is_set():
                    return
                log.warning("watch %s: %s: %s", self.res.plural, type(exc).__name__, exc)
            self.stop_event.wait(1.0)

    def _watch(self, version: str) -> None:
        while not self.stop_event.is_set():
            for event_type, obj in self.kube.watch(self.res, version, self.namespace):
                if self.stop_event.is_set():
                    return
                if event_type == "ERROR":
                    code = obj.get("code")
                    raise KubeError(int(code or 0), str(obj.get("reason", "")), str(obj))
                new = (obj.get("metadata") or {}).get("resourceVersion")
                if new:
                    version = str(new)
                if event_type == "BOOKMARK":
                    continue
                if self.label_selector and not _matches(obj, self.label_selector):
                    continue
                obj.setdefault("kind", self.res.kind)
                obj.setdefault("apiVersion", self.res.group_version)
                with contextlib.suppress(Exception):
                    self.out.put(("event", self.res.kind, (event_type, obj)))


def _matches(obj: dict[str, Any], selector: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in selector.split(","):
        if "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.strip() and term.strip() not in labels:
            return False
    return True
