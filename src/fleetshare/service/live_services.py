"""Services whose replicas follow a live scaler in ``fleetshare serve`` (``POST
/api/v1/services``): every ``polling_interval_seconds`` the scaler reads each trigger's
Prometheus query (:mod:`fleetshare.inference.live`), decides the replicas with the
simulator's rules, and the difference is submitted or cancelled as one-pod workloads of the
service's team and priority class (named ``<service>-r<n>``, submitted as the token that
registered the service), so governance admits, places and preempts them like any workload.
Scale-down cancels pending replicas before admitted ones, newest first in each.

A failed read (Prometheus away, an empty result with ``ignore_null_values`` off...) keeps the
replicas as they are and is shown as the service's ``error`` (KEDA keeps the replicas too).

Durability. A service is committed to the store before the API answers 201
(:mod:`fleetshare.service.stored_services`); any replica may register, update or delete one.
An update (``PUT``) changes the rules in place: the leader's next turn carries the scaler's
state over to them, and replicas submitted from then on use the new replica spec. Only the
leader scales: about every half second its services thread reads the stored services, takes
over the ones it does not run yet and lets go of the deleted ones (cancelling any replica it
submitted after the deletion committed). Taking over, at start-up, after a restart or a
failover, adopts the replicas that exist (the pending and admitted ``<service>-r<n>``
workloads) instead of submitting new ones, numbers new replicas after the highest ``n`` ever
used, and starts the scaler from :func:`~fleetshare.inference.scaler.resumed`: the rate
policies' periods are rebuilt from the replicas' submission and cancellation times; the
stabilisation windows' proposals were only in memory and are lost, so the replicas that
exist count as a proposal made at the take-over (no scale-down before the down window has
passed again; KEDA and the HPA likewise keep their windows in memory and start them afresh
when their controller restarts). The last decision and error shown by the API are the
leader's (a follower shows none).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import Field, model_validator
from sqlalchemy import Connection, Row, select

from fleetshare.inference.live import LiveScaler
from fleetshare.inference.prometheus import MetricError, MetricSource, PrometheusSource
from fleetshare.inference.scaler import resumed
from fleetshare.inference.service import ROLE_LABEL, SERVICE_LABEL
from fleetshare.inference.spec import PrometheusQuery, ReplicaSpec, ScalerSpec
from fleetshare.inputs import StrictModel
from fleetshare.scenario.schema import WorkloadSpec
from fleetshare.service import store as tables
from fleetshare.service import stored_services
from fleetshare.service.auth import Principal
from fleetshare.service.plane import (
    ACTIVE,
    Conflict,
    ControlPlane,
    Forbidden,
    Invalid,
    NotFound,
    ServiceError,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Refused:
    """A trigger whose Prometheus the server may not query: every read fails, saying why."""

    why: str

    def read(self) -> float:
        raise MetricError(self.why)


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
    """One stored service the leader scales, and what its scaler last did."""

    id: int
    """Its row in the store (a service deleted and registered again is another)."""
    spec: LiveServiceSpec
    principal: Principal
    scaler: LiveScaler
    replicas: list[str] = field(default_factory=list)
    """Its replica workloads still pending or admitted, oldest first."""
    serial: int = 0
    document: dict[str, Any] = field(default_factory=dict)
    """The spec as stored, to see an update."""
    due: float = 0.0
    last: dict[str, Any] = field(default_factory=dict)


def _out(row: Row[Any], replicas: list[str], last: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": row.name,
        "team": row.team,
        "spec": row.spec,
        "created_by": row.created_by,
        "created_at": row.created_at,
        "replicas": replicas,
        **last,
    }


class LiveServices:
    """The stored services and the thread that ticks their scalers on the leader."""

    def __init__(self, plane: ControlPlane, client: httpx.Client | None = None) -> None:
        self.plane = plane
        self.client = client if client is not None else httpx.Client()
        self.services: dict[str, LiveService] = {}
        """The services this replica scales (the leader's), by name."""
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what the API asks -----------------------------------------------------------------

    def add(self, spec: LiveServiceSpec, principal: Principal) -> dict[str, Any]:
        """Commit the service ``spec`` (its replicas are submitted as ``principal``); the
        service as stored. 409 when one of that name exists."""
        return self.apply(spec, principal, replace=False)[0]

    def apply(
        self, spec: LiveServiceSpec, principal: Principal, *, replace: bool = True
    ) -> tuple[dict[str, Any], bool]:
        """Register the service ``spec``, or (``replace``) change the one of that name in
        place; the service as stored and whether it was created. An update keeps the
        service's replicas, its registering token and its team (moving a service to another
        team is a delete and a register); the leader's scaler carries on with the new rules
        from its state, and replicas submitted from then on use the new replica spec and
        priority (the running ones keep theirs)."""
        self._check(spec, principal)
        document = spec.model_dump(mode="json", exclude_defaults=True)
        with self.plane.store.write("services-write") as conn:
            row = stored_services.find(conn, spec.name)
            at = self.plane.unix(self.plane.clock.now())
            if row is not None and not (replace and principal.sees_team(row.team)):
                # names are global: another team's service answers as it does to a POST
                raise Conflict(f"a service named {spec.name!r} exists already")
            if row is None:
                stored_services.save(
                    conn,
                    spec.name,
                    spec.team,
                    document,
                    (principal.token_id, principal.scope),
                    principal.actor,
                    at,
                )
            elif row.team != spec.team:
                raise Invalid(
                    f"service {spec.name!r} is team {row.team}'s; delete it and register it "
                    "again to move it",
                    "team",
                )
            elif row.spec != document:
                stored_services.update(conn, spec.name, row.team, document, principal.actor, at)
            stored = stored_services.find(conn, spec.name)
            assert stored is not None
            out = self._described(conn, stored)
        return out, row is None

    def _check(self, spec: LiveServiceSpec, principal: Principal) -> None:
        if not principal.can_write_workloads:
            raise Forbidden("a viewer token cannot register services")
        if not principal.sees_team(spec.team):
            raise Forbidden(
                f"a {principal.scope} token registers services of team {principal.team} only"
            )
        if spec.team not in {t.name for t in self.plane.policy.teams}:
            raise Invalid(f"unknown team {spec.team!r}", "team")
        self._check_servers(spec)
        try:
            self.plane.policy.priority_of(spec.priority)
        except KeyError as exc:
            raise Invalid(exc.args[0], "priority") from None

    @property
    def servers(self) -> dict[str, str]:
        """The Prometheus servers services may query, by name: the admin's list (the
        config's ``prometheus_servers``)."""
        return dict(self.plane.config.spec.prometheus_servers)

    def _refusal(self, query: PrometheusQuery, where: str) -> str | None:
        """Why the server may not query ``query``'s Prometheus (None: it may): the server
        never fetches an address a team chose; a trigger names one of the admin's servers
        (``server``) or gives the address of one."""
        servers = self.servers
        listed = ", ".join(sorted(servers)) or "none (the config's prometheus_servers)"
        if query.server is not None and query.server not in servers:
            return (
                f"{where}.server: {query.server!r} is not a Prometheus server the admin lists "
                f"(listed: {listed})"
            )
        addresses = {url.rstrip("/") for url in servers.values()}
        if query.server_address is not None and query.server_address.rstrip("/") not in addresses:
            return (
                f"{where}.server_address: only the Prometheus servers the admin lists may be "
                f"queried; name one with server (listed: {listed})"
            )
        return None

    def _check_servers(self, spec: LiveServiceSpec) -> None:
        for i, trigger in enumerate(spec.scaler.triggers):
            assert trigger.prometheus is not None  # LiveServiceSpec requires it
            why = self._refusal(trigger.prometheus, f"scaler.triggers[{i}].prometheus")
            if why is not None:
                raise Invalid(why, "scaler")

    def _sources(self, spec: LiveServiceSpec) -> list[MetricSource]:
        """A source per trigger; one whose server the admin no longer lists (a service
        stored before) fails every read with the reason, fetching nothing."""
        sources: list[MetricSource] = []
        for i, trigger in enumerate(spec.scaler.triggers):
            assert trigger.prometheus is not None
            why = self._refusal(trigger.prometheus, f"scaler.triggers[{i}].prometheus")
            if why is not None:
                sources.append(_Refused(why))
            else:
                sources.append(PrometheusSource(trigger.prometheus.at(self.servers), self.client))
        return sources

    def visible(self, name: str, who: Principal) -> dict[str, Any]:
        """The service ``name`` as ``who`` may see it (404 when it may not, as when there is
        none)."""
        with self.plane.store.read("services-read") as conn:
            row = stored_services.find(conn, name)
            if row is None or not who.sees_team(row.team):
                raise NotFound(f"no service {name!r}")
            return self._described(conn, row)

    def listed(self, who: Principal) -> list[dict[str, Any]]:
        """The services ``who`` may see, in registration order."""
        with self.plane.store.read("services-read") as conn:
            rows = stored_services.listed(conn, who.team)
            return [self._described(conn, r) for r in rows]

    def delete(self, name: str, who: Principal) -> dict[str, Any]:
        """Commit the deletion of the service ``name`` and the cancellation of its pending and
        admitted replicas (one transaction); the service as it was."""
        with self.plane.store.write("services-write") as conn:
            row = stored_services.find(conn, name)
            if row is None or not who.sees_team(row.team):
                raise NotFound(f"no service {name!r}")
            if not who.can_write_workloads:
                raise Forbidden("a viewer token cannot delete services")
            out = self._described(conn, row)
            at = self.plane.unix(self.plane.clock.now())
            for replica in out["replicas"]:
                self.plane.cancel_in(conn, replica, row.team, who.actor, at)
            stored_services.remove(conn, name, row.team, who.actor, at)
        self.plane.wake()
        return {**out, "replicas": []}

    def _described(self, conn: Connection, row: Row[Any]) -> dict[str, Any]:
        replicas = [
            r.name for r in stored_services.replicas(conn, row.name, row.team) if r.state in ACTIVE
        ]
        with self.lock:
            mine = self.services.get(row.name)
            last = dict(mine.last) if mine is not None and mine.id == row.id else {}
        return _out(row, replicas, last)

    # -- the leader's turns ----------------------------------------------------------------

    def sync(self, now: float) -> None:
        """Run the stored services: take over the new ones (adopting their replicas), let go
        of the deleted ones (see the module docstring)."""
        with self.plane.store.read("services-read") as conn:
            rows = {r.name: r for r in stored_services.listed(conn)}
        with self.lock:
            gone = [s for n, s in self.services.items() if n not in rows or rows[n].id != s.id]
        for service in gone:
            self._let_go(service)
        with self.lock:
            for name, service in self.services.items():
                if rows[name].spec != service.document:
                    self._changed(service, rows[name].spec, now)
            new = [r for n, r in rows.items() if n not in self.services]
        if not new:
            return
        with self.plane.store.read("services-read") as conn:
            taken = [self._take_over(conn, row, now) for row in new]
        with self.lock:
            for service in taken:
                self.services[service.spec.name] = service

    def _take_over(self, conn: Connection, row: Row[Any], now: float) -> LiveService:
        spec = LiveServiceSpec.model_validate(row.spec)
        history = stored_services.replicas(conn, row.name, row.team)
        alive = [r.name for r in history if r.state in ACTIVE]
        state = resumed(len(alive), now, stored_services.changes(history, self.plane.epoch))
        scaler = LiveScaler(spec.scaler, self._sources(spec), state)
        return LiveService(
            row.id,
            spec,
            Principal(row.token_id, row.scope),
            scaler,
            alive,
            stored_services.highest_serial(conn, row.name),
            row.spec,
        )

    def _changed(self, service: LiveService, document: dict[str, Any], now: float) -> None:
        """Carry on with an updated spec: the scaler keeps its state (replicas, windows,
        rate periods) under the new rules, due at once."""
        spec = LiveServiceSpec.model_validate(document)
        service.scaler = LiveScaler(spec.scaler, self._sources(spec), service.scaler.state)
        service.spec, service.document, service.due = spec, document, now

    def _let_go(self, service: LiveService) -> None:
        """Stop scaling a deleted service; cancel the replicas it still has (ones submitted
        after the deletion committed)."""
        with self.lock:
            if self.services.get(service.spec.name) is service:
                del self.services[service.spec.name]
        for name in self._alive(service.replicas):
            with contextlib.suppress(ServiceError):  # cancelled meanwhile
                self.plane.cancel(name, service.principal)

    def tick(self, now: float) -> None:
        """One turn: :meth:`sync`, then every service whose polling interval has passed
        (loop time ``now``)."""
        self.sync(now)
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
                name = stored_services.replica_name(service.spec.name, service.serial)
                self.plane.submit(self._replica(service.spec, name), service.principal)
                service.replicas.append(name)
            surplus = len(service.replicas) - decision.replicas
            if surplus > 0:
                for name in self._deletion_order(service.replicas)[:surplus]:
                    self.plane.cancel(name, service.principal)
                    service.replicas.remove(name)
        except ServiceError as exc:  # e.g. the store refused
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
        with self.plane.store.read("services-read") as conn:
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
                with self.lock:  # another replica scales them; taken over again if we lead
                    self.services.clear()
                continue
            try:
                self.tick(self.plane.clock.now())
            except Exception:  # a store or API error: try again next turn
                log.warning("live services: a turn failed", exc_info=True)
