"""Live services in the store (table ``services``): registered, updated and deleted each in one
write transaction with an audit row and a ``service`` event (as node pools are), and their
replica workloads found again by name and label.

A service's replicas are the workloads named ``<service>-r<n>`` of its team labelled
``fleetshare.io/service: <service>``; ``n`` counts up over the name's whole history (workload
names are never reused), so a service registered again under a deleted one's name goes on
from the highest ``n`` ever used.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Row, select

from fleetshare.inference.scaler import ScaleEvent
from fleetshare.inference.service import SERVICE_LABEL
from fleetshare.service import store as tables

SERVICE_EVENT = "service"
"""The event kind of a service registered or deleted (``details.action``)."""


def replica_name(service: str, serial: int) -> str:
    """The workload name of a service's replica number ``serial``."""
    return f"{service}-r{serial}"


def replica_serial(service: str, workload: str) -> int | None:
    """``n`` when ``workload`` is named ``<service>-r<n>``, else None."""
    found = re.fullmatch(re.escape(service) + r"-r([1-9][0-9]*)", workload)
    return int(found.group(1)) if found else None


def find(conn: Connection, name: str) -> Row[Any] | None:
    """The stored service ``name``, or None."""
    s = tables.services
    return conn.execute(select(s).where(s.c.name == name)).first()


def listed(conn: Connection, team: str | None = None) -> list[Row[Any]]:
    """The stored services (of ``team`` only, when given) in registration order."""
    s = tables.services
    query = select(s).order_by(s.c.id)
    if team is not None:
        query = query.where(s.c.team == team)
    return list(conn.execute(query))


def save(
    conn: Connection,
    name: str,
    team: str,
    spec: dict[str, Any],
    principal: tuple[int, str],
    actor: str,
    at: float,
) -> int:
    """Store a new service (registered by the token ``(id, scope)``) with its audit row and
    ``service`` event; its id. The caller checked that the name is free."""
    token_id, scope = principal
    result = conn.execute(
        tables.services.insert().values(
            name=name,
            team=team,
            spec=spec,
            token_id=token_id,
            scope=scope,
            created_at=at,
            created_by=actor,
        )
    )
    assert result.inserted_primary_key is not None
    _record(conn, "register", name, team, actor, at)
    return int(result.inserted_primary_key[0])


def update(
    conn: Connection, name: str, team: str, spec: dict[str, Any], actor: str, at: float
) -> None:
    """Replace the stored service's spec (its id, team and registering token stay) with its
    audit row and ``service`` event."""
    s = tables.services
    conn.execute(s.update().where(s.c.name == name).values(spec=spec))
    _record(conn, "update", name, team, actor, at)


def remove(conn: Connection, name: str, team: str, actor: str, at: float) -> None:
    """Delete the stored service with its audit row and ``service`` event (its replicas are
    the caller's to cancel in the same transaction)."""
    s = tables.services
    conn.execute(s.delete().where(s.c.name == name))
    _record(conn, "delete", name, team, actor, at)


def _record(conn: Connection, action: str, name: str, team: str, actor: str, at: float) -> None:
    details = {"action": action, "service": name}
    conn.execute(
        tables.audit_log.insert().values(
            at=at, actor=actor, action=f"service-{action}", details=details
        )
    )
    conn.execute(
        tables.events.insert().values(
            at=at,
            kind=SERVICE_EVENT,
            workload=None,
            team=team,
            details={**details, "by": actor},
        )
    )


def replicas(conn: Connection, name: str, team: str) -> list[Row[Any]]:
    """Every workload that is or was a replica of the service ``name`` of ``team`` (any
    state), in submission order: ``id``, ``name``, ``state``, ``submitted_at``,
    ``finished_at``."""
    w = tables.workloads
    rows: Any = conn.execute(
        select(w.c.id, w.c.name, w.c.team, w.c.state, w.c.spec, w.c.submitted_at, w.c.finished_at)
        .where(w.c.name.like(f"{name}-r%"), w.c.team == team)
        .order_by(w.c.id)
    )
    return [
        r
        for r in rows
        if replica_serial(name, r.name) is not None
        and (r.spec.get("labels") or {}).get(SERVICE_LABEL) == name
    ]


def highest_serial(conn: Connection, name: str) -> int:
    """The highest ``n`` of any workload named ``<name>-r<n>`` (0: none)."""
    w = tables.workloads
    names = conn.execute(select(w.c.name).where(w.c.name.like(f"{name}-r%"))).scalars()
    return max((n for x in names if (n := replica_serial(name, x)) is not None), default=0)


def changes(rows: Sequence[Row[Any]], epoch: float) -> list[ScaleEvent]:
    """The scale events the replica rows tell of, in loop time (Unix time - ``epoch``): +1
    at each replica's submission, -1 at each cancellation, oldest first (pure; the scaler
    forgets those older than its periods)."""
    out = [ScaleEvent(r.submitted_at - epoch, 1) for r in rows]
    out += [
        ScaleEvent(r.finished_at - epoch, -1)
        for r in rows
        if r.state == "cancelled" and r.finished_at is not None
    ]
    return sorted(out, key=lambda e: e.at)
