"""Leader election with a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection
does: the holder renews ``renewTime`` every ``renew_seconds``; another replica takes the Lease
over once ``leaseDurationSeconds`` have passed without a renewal. Every write is conditional on
the resourceVersion read, so two replicas can never both win. A leader that fails to renew
for the lease's duration stops acting (it may already have been replaced); one that stops
cleanly gives the Lease up so a standby takes over at once.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

from fleetshare.operator.kube import LEASES, Kube, KubeError

log = logging.getLogger("fleetshare.operator")


def _micro(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> float:
    if not text:
        return 0.0
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class LeaseElector:
    """One replica's side of the election."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        identity: str,
        name: str = "fleetshare-operator",
        lease_seconds: float = 15.0,
        renew_seconds: float = 5.0,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.identity = identity
        self.name = name
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.holder = ""
        """Who held the Lease when this replica last failed to take it."""
        self.renewed_at: float | None = None
        """Monotonic time of the last successful acquire or renewal (None: not leader)."""

    def leading(self) -> bool:
        """True while the last renewal is recent enough that no one else can hold the Lease
        (with a margin for clock rates)."""
        return (
            self.renewed_at is not None
            and time.monotonic() - self.renewed_at < self.lease_seconds * 0.8
        )

    def due(self) -> bool:
        return self.renewed_at is None or time.monotonic() - self.renewed_at >= self.renew_seconds

    def try_acquire(self) -> bool:
        """Acquire or renew; True when this replica holds the Lease now."""
        now = time.time()
        try:
            lease = self.kube.get(LEASES, self.name, self.namespace)
        except KubeError as exc:
            if exc.status != 404:
                log.warning("lease: %s", exc)
                return self._failed()
            return self._create(now)
        spec: dict[str, Any] = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.lease_seconds)
        renewed = _parse(spec.get("renewTime"))
        if holder and holder != self.identity and now < renewed + duration:
            self.holder = holder
            return self._failed()
        transitions = int(spec.get("leaseTransitions") or 0)
        new_spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_seconds),
            "renewTime": _micro(now),
            "acquireTime": spec.get("acquireTime") if holder == self.identity else _micro(now),
            "leaseTransitions": transitions if holder == self.identity else transitions + 1,
        }
        body = {**lease, "spec": new_spec}
        try:
            self.kube.replace(LEASES, self.name, body, self.namespace)
        except KubeError as exc:
            if exc.status != 409:
                log.warning("lease: %s", exc)
            return self._failed()
        if holder != self.identity:
            log.info("lease %s/%s acquired by %s", self.namespace, self.name, self.identity)
        self.renewed_at = time.monotonic()
        return True

    def _create(self, now: float) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_seconds),
                "acquireTime": _micro(now),
                "renewTime": _micro(now),
                "leaseTransitions": 0,
            },
        }
        try:
            self.kube.create(LEASES, body, self.namespace)
        except KubeError:
            return self._failed()
        log.info("lease %s/%s created by %s", self.namespace, self.name, self.identity)
        self.renewed_at = time.monotonic()
        return True

    def _failed(self) -> bool:
        return self.leading()

    def release(self) -> None:
        """Give the Lease up (a clean stop), so a standby need not wait for it to expire."""
        if self.renewed_at is None:
            return
        self.renewed_at = None
        try:
            lease = self.kube.get(LEASES, self.name, self.namespace)
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.identity:
                return
            spec["holderIdentity"] = ""
            spec["renewTime"] = _micro(0)
            self.kube.replace(LEASES, self.name, {**lease, "spec": spec}, self.namespace)
        except KubeError as exc:
            log.debug("lease release: %s", exc)
