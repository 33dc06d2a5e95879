"""Node pools in the service: checked against the catalog and the cloud, versioned in the
store like the policy (``nodepool_versions``, an audit row and a ``nodepools`` event per
change), and each pool's live nodes against its limits.

The pools in force are the store's latest version once one was set through the API, else the
config file's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, select

from fleetshare.autoscaling.nodepool import (
    NODES,
    NodePool,
    PoolSet,
    pool_problems,
    pool_usage,
    unknown_zones,
)
from fleetshare.model.catalog import Catalog
from fleetshare.model.quantity import to_number
from fleetshare.service import store as tables

POOLS_EVENT = "nodepools"
"""The event kind of a change of the node pools (the leader's loop applies it)."""


def problems(
    pools: Sequence[NodePool], catalog: Catalog, zones: Iterable[str]
) -> list[tuple[list[str | int], str]]:
    """``(loc, why)`` for every pool field naming what the catalog or the cloud does not
    have (``loc`` as in a 422: ``["body", "pools", i, field]``); the same checks as a
    scenario's or the operator's pools."""
    out: list[tuple[list[str | int], str]] = []
    known = sorted(set(zones))
    for i, pool in enumerate(pools):
        where: list[str | int] = ["body", "pools", i]
        for path, why in pool_problems(pool, catalog):
            out.append(([*where, *([path.lstrip(".")] if path else [])], why))
        unknown = unknown_zones(pool, known)
        if unknown:
            why = f"node pool {pool.name} names zones {unknown} the cloud does not have ({known})"
            out.append(([*where, "zones"], why))
    return out


def document(pools: Sequence[NodePool]) -> dict[str, Any]:
    """The pools as stored: ``{"pools": [...]}`` in fleetshare's format, defaults left out."""
    return {"pools": [p.model_dump(mode="json", exclude_defaults=True) for p in pools]}


def from_document(data: Any) -> list[NodePool]:
    """The pools of a stored document."""
    return PoolSet.model_validate(data).pools


def latest(conn: Connection) -> Row[Any] | None:
    """The latest stored version (``id``, ``created_at``, ``document``, ``author``), or None
    when none was ever set (the config's pools are in force)."""
    t = tables.nodepool_versions
    return conn.execute(select(t).order_by(t.c.id.desc()).limit(1)).first()


def save(conn: Connection, pools: Sequence[NodePool], actor: str, at: float) -> int:
    """Store a new version with its audit row and ``nodepools`` event; its id."""
    result = conn.execute(
        tables.nodepool_versions.insert().values(
            created_at=at, document=document(pools), author=actor
        )
    )
    assert result.inserted_primary_key is not None
    version = int(result.inserted_primary_key[0])
    names = [p.name for p in pools]
    details = {"version": version, "pools": names}
    conn.execute(
        tables.audit_log.insert().values(
            at=at, actor=actor, action="nodepools-set", details=details
        )
    )
    conn.execute(
        tables.events.insert().values(
            at=at, kind=POOLS_EVENT, workload=None, team=None, details={**details, "by": actor}
        )
    )
    return version


@dataclass(frozen=True)
class PoolStatus:
    """A pool's live nodes and what they hold, against its limits (base units; ``nodes`` a
    count)."""

    pool: NodePool
    nodes: int
    used: dict[str, int | float]
    limits: dict[str, int | float]


def status(
    pools: Sequence[NodePool], members: Iterable[tuple[str, Mapping[str, int]]]
) -> list[PoolStatus]:
    """Each pool's status from its nodes' ``(pool, counted)`` pairs (the usage every limit
    check reads, :func:`~fleetshare.autoscaling.nodepool.pool_usage`: each node's capacity)."""
    usage = pool_usage(members)
    out = []
    for pool in pools:
        used = usage.get(pool.name, {NODES: 0})
        limits: dict[str, int | float] = {}
        for resource in pool.limits:
            milli = pool.limit_of(resource)
            assert milli is not None
            limits[resource] = milli // 1000 if resource == NODES else to_number(milli)
        out.append(
            PoolStatus(
                pool,
                used[NODES],
                {r: v if r == NODES else to_number(v) for r, v in sorted(used.items())},
                limits,
            )
        )
    return out
