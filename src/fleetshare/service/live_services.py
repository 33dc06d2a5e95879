"""Services whose replicas follow a live scaler in ``fleetshare serve`` (``POST
/api/v1/services``): every ``polling_interval_seconds`` the scaler reads each trigger's
Prometheus query (:mod:`fleetshare.inference.live`), decides the replicas with the
simulator's rules, and the difference is submitted or cancelled as one-pod workloads of the
service's team and priority class (named ``<service>-r<n>``, submitted as the token that
registered the service), so governance admits, places and preempts them like any workload.
Scale-down cancels pending replicas before admitted ones, newest first in each.

A failed read (Prometheus away, an empty result with ``ignore_null_values`` off...) keeps the
replicas as they are and is shown as the service's ``error`` (KEDA keeps the replicas too).
Limits, said where they apply: services are kept in memory by the replica that registered
them (not in the store: a restart forgets them, its replica workloads stay) and scale only
while that replica leads.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import Field, model_validator
from sqlalchemy import select

from fleetshare.inference.live import LiveScaler, prometheus_sources
from fleetshare.inference.prometheus import MetricError
from fleetshare.inference.service import ROLE_LABEL, SERVICE_LABEL
from fleetshare.inference.spec import ReplicaSpec, ScalerSpec
from fleetshare.inputs import StrictModel
from fleetshare.scenario.schema import WorkloadSpec
from fleetshare.service import store as tables
from fleetshare.service.auth import Principal
from fleetshare.service.plane import (
    ACTIVE,
    Conflict,
    ControlPlane,
    Forbidden,
    Invalid,
    ServiceError,
)

log = logging.getLogger(__name__)


class LiveServiceSpec(StrictModel):
    """A service to scale live: its replica's pod and a scaler whose triggers each name a
    Prometheus query."""

    name: str = Field(min_length=1, max_length=60, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    team: str = Field(min_length=1)
    priority: str | None = None
    replica: ReplicaSpec
    scaler: ScalerSpec

    @model_validator(mode="after")
    def _queries(self) -> LiveServiceSpec:
        for i, trigger in enumerate(self.scaler.triggers):
            if trigger.prometheus is None:
                raise ValueError(
                    f"scaler.triggers[{i}].prometheus: a live service reads each trigger "
                    "from a Prometheus query"
                )
        return self


@dataclass
class LiveService:
    """One registered service and what its scaler last did."""

    spec: LiveServiceSpec
    principal: Principal
    scaler: LiveScaler
    replicas: list[str] = field(default_factory=list)
    """Its replica workloads still pending or admitted, oldest first."""
    serial: int = 0
    due: float = 0.0
    last: dict[str, Any] = field(default_factory=dict)

    def out(self) -> dict[str, Any]:
        return {
            "name": self.spec.name,
            "team": self.spec.team,
            "replicas": list(self.replicas),
            **self.last,
        }


class LiveServices:
    """The registered services and the thread that ticks their scalers."""

    def __init__(self, plane: ControlPlane, client: httpx.Client | None = None) -> None:
        self.plane = plane
        self.client = client if client is not None else httpx.Client()
        self.services: dict[str, LiveService] = {}
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, spec: LiveServiceSpec, principal: Principal) -> LiveService:
        """Register ``spec`` (its replicas are submitted as ``principal``)."""
        if not principal.can_write_workloads:
            raise Forbidden("a viewer token cannot register services")
        if not principal.sees_team(spec.team):
            raise Forbidden(
                f"a {principal.scope} token registers services of team {principal.team} only"
            )
        if spec.team not in {t.name for t in self.plane.policy.teams}:
            raise Invalid(f"team: unknown team {spec.team!r}")
        try:
            self.plane.policy.priority_of(spec.priority)
        except KeyError as exc:
            raise Invalid(f"priority: {exc.args[0]}") from None
        with self.lock:
            if spec.name in self.services:
                raise Conflict(f"a service named {spec.name!r} exists already")
            service = LiveService(
                spec,
                principal,
                LiveScaler(spec.scaler, prometheus_sources(spec.scaler, self.client)),
            )
            self.services[spec.name] = service
        return service

    def listed(self) -> list[dict[str, Any]]:
        with self.lock:
            return [s.out() for s in self.services.values()]

    def tick(self, now: float) -> None:
        """One turn for every service whose polling interval has passed (loop time ``now``)."""
        with self.lock:
            due = [s for s in self.services.values() if s.due <= now]
        for service in due:
            service.due = now + service.spec.scaler.polling_interval_seconds
            self._tick(service, now)

    def _tick(self, service: LiveService, now: float) -> None:
        service.replicas = self._alive(service.replicas)
        try:
            decision = service.scaler.tick(now, current=len(service.replicas))
        except MetricError as exc:
            service.last = {**service.last, "error": str(exc), "error_at": now}
            return
        service.last = {"wanted": decision.replicas, "why": decision.why, "at": now, "error": None}
        try:
            for _ in range(decision.replicas - len(service.replicas)):
                service.serial += 1
                name = f"{service.spec.name}-r{service.serial}"
                self.plane.submit(self._replica(service.spec, name), service.principal)
                service.replicas.append(name)
            surplus = len(service.replicas) - decision.replicas
            if surplus > 0:
                for name in self._deletion_order(service.replicas)[:surplus]:
                    self.plane.cancel(name, service.principal)
                    service.replicas.remove(name)
        except ServiceError as exc:  # e.g. the token was revoked, the store refused
            service.last = {**service.last, "error": f"{type(exc).__name__}: {exc.message}"}

    @staticmethod
    def _replica(spec: LiveServiceSpec, name: str) -> WorkloadSpec:
        return WorkloadSpec(
            name=name,
            team=spec.team,
            priority=spec.priority,
            requests=spec.replica.requests,
            node_selector=spec.replica.node_selector,
            labels={SERVICE_LABEL: spec.name, ROLE_LABEL: "replica"},
        )

    def _states(self, names: list[str]) -> dict[str, str]:
        w = tables.workloads
        with self.plane.store.read() as conn:
            rows = conn.execute(select(w.c.name, w.c.state).where(w.c.name.in_(names)))
            return {r.name: r.state for r in rows}

    def _alive(self, names: list[str]) -> list[str]:
        """The replicas still pending or admitted (others finished or were cancelled)."""
        states = self._states(names) if names else {}
        return [n for n in names if states.get(n) in ACTIVE]

    def _deletion_order(self, names: list[str]) -> list[str]:
        """Pending before admitted, newest first in each (as a ReplicaSet deletes)."""
        states = self._states(names)
        newest = list(reversed(names))
        return sorted(newest, key=lambda n: states.get(n) != "pending")

    # -- the thread ------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="fleetshare-services", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            if not self.plane.leader:
                continue
            try:
                self.tick(self.plane.clock.now())
            except Exception:  # a store or API error: try again next turn
                log.warning("live services: a turn failed", exc_info=True)
