"""Who owns what among the watched objects: per owner uid, the pods and workload objects
(Jobs, JobSets, ...) whose ``ownerReferences`` name it.

The operator finds a Job's pods (and a JobSet's Jobs' pods) here. :meth:`OwnerIndex.build`
reads a whole :class:`~fleetshare.operator.watch.Store`; :meth:`OwnerIndex.update` follows
one object's change, so the incremental view keeps the index without reading the store again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fleetshare.operator.watch import Key, Store

Ref = tuple[str, Key]
"""(kind, (namespace, name)) of a watched object."""


class OwnerIndex:
    """Owned objects by owner uid, and the uid of each object (see the module docstring)."""

    def __init__(self, store: Store, kinds: Iterable[str]) -> None:
        self.store = store
        self.kinds = frozenset(kinds)
        """The kinds indexed (the workload kinds and Pod)."""
        self._owned: dict[str, dict[Ref, dict[str, Any]]] = {}
        self._owners: dict[Ref, tuple[str, ...]] = {}
        self._by_uid: dict[str, Ref] = {}
        self._uid: dict[Ref, str] = {}

    @classmethod
    def build(cls, store: Store, kinds: Iterable[str]) -> OwnerIndex:
        """The index of everything ``store`` holds of ``kinds``."""
        index = cls(store, kinds)
        for kind in index.kinds:
            for key, obj in store.of(kind).items():
                index.update(kind, key, obj)
        return index

    def update(self, kind: str, key: Key, obj: dict[str, Any] | None) -> None:
        """``obj`` is now the object at (kind, key) (None: it is gone)."""
        ref = (kind, key)
        for uid in self._owners.pop(ref, ()):
            owned = self._owned.get(uid)
            if owned is not None:
                owned.pop(ref, None)
                if not owned:
                    del self._owned[uid]
        old_uid = self._uid.pop(ref, None)
        if old_uid is not None and self._by_uid.get(old_uid) == ref:
            del self._by_uid[old_uid]
        if obj is None:
            return
        meta = obj.get("metadata") or {}
        uids = tuple(str(r["uid"]) for r in meta.get("ownerReferences") or () if r.get("uid"))
        if uids:
            self._owners[ref] = uids
            for uid in uids:
                self._owned.setdefault(uid, {})[ref] = obj
        if meta.get("uid"):
            self._uid[ref] = str(meta["uid"])
            self._by_uid[str(meta["uid"])] = ref

    def pods_of(self, uid: str, namespace: str) -> list[dict[str, Any]]:
        """The pods owned by ``uid`` or by an object it owns (a JobSet's Jobs, a RayJob's
        RayCluster), in ``namespace``, in the store's order."""
        found: list[tuple[int, dict[str, Any]]] = []
        seen: set[str] = set()
        frontier = [uid]
        position = self.store.position
        while frontier:
            owner = frontier.pop()
            if owner in seen:
                continue
            seen.add(owner)
            for ref, obj in self._owned.get(owner, {}).items():
                if obj["metadata"].get("namespace") != namespace:
                    continue
                if ref[0] == "Pod":
                    found.append((position.get(ref, 0), obj))
                else:
                    frontier.append(str(obj["metadata"].get("uid")))
        return [obj for _, obj in sorted(found, key=lambda pair: pair[0])]

    def owners_of(self, kind: str, key: Key) -> list[Ref]:
        """The watched objects that own (kind, key), directly or through others."""
        out: list[Ref] = []
        frontier = list(self._owners.get((kind, key), ()))
        seen: set[str] = set()
        while frontier:
            uid = frontier.pop()
            if uid in seen:
                continue
            seen.add(uid)
            ref = self._by_uid.get(uid)
            if ref is not None:
                out.append(ref)
                frontier.extend(self._owners.get(ref, ()))
        return out
