"""The service's sink: the loop's typed changes (:mod:`fleetshare.control.changes`) as the
store's workload rows, node rows and events, in its own words.

The workload rows the changes touch are read first (writers are serialized, so nothing moves
between that read and the writes), each change is applied in order to what the row holds
(admit only a ``pending`` row, preempt or finish only an ``admitted`` one: a cancellation
committed meanwhile wins), then every touched row is written with one batched UPDATE and the
events with one INSERT.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, assert_never

from sqlalchemy import JSON, Connection, Float, Integer, bindparam, func, select

from fleetshare.control import changes as ch
from fleetshare.model.node import Node
from fleetshare.model.quantity import to_number
from fleetshare.service import pg_writes
from fleetshare.service import store as tables
from fleetshare.service.backend import NodeInfo, assignment_json, node_row
from fleetshare.service.store import named

CHUNK = 500
"""Names per ``IN`` (or ``= ANY``) of a read."""
_W = tables.workloads
_ROW_UPDATE = (
    _W.update()
    .where(_W.c.name == bindparam("b_name"))
    .values(
        state=bindparam("b_state"),
        pending_since=bindparam("b_pending_since"),
        admitted_at=bindparam("b_admitted_at"),
        first_admitted_at=func.coalesce(_W.c.first_admitted_at, bindparam("b_first", type_=Float)),
        finished_at=bindparam("b_finished_at"),
        assignment=bindparam("b_assignment", type_=JSON(none_as_null=True)),
        borrowed=bindparam("b_borrowed", type_=JSON(none_as_null=True)),
        preemptions=_W.c.preemptions + bindparam("b_preempted", type_=Integer),
    )
)
"""One UPDATE for every workload row a step touched (executed with many parameter sets)."""


def upsert_node(conn: Connection, node: Node, info: NodeInfo, at: float) -> None:
    """Write a node's row, joined at ``at``."""
    row = node_row(node, info)
    values = {**row, "joined_at": at, "left_at": None, "leave_reason": None, "draining": False}
    t = tables.nodes
    if not conn.execute(t.update().where(t.c.name == node.name).values(values)).rowcount:
        conn.execute(t.insert().values(values))


@dataclass
class _Batch:
    """One transaction's writes, built change by change."""

    conn: Connection
    nodes: Mapping[str, Node]
    node_info: Mapping[str, NodeInfo]
    rows: dict[str, dict[str, Any]]
    touched: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)

    def event(
        self, at: float, kind: str, workload: str | None, team: str | None, details: Any
    ) -> None:
        self.events.append(
            {"at": at, "kind": kind, "workload": workload, "team": team, "details": details}
        )

    def row(self, workload: str, state: str) -> dict[str, Any] | None:
        """The workload's row when it is in ``state`` (it is touched then), else None."""
        row = self.rows.get(workload)
        if row is None or row["state"] != state:
            return None
        self.touched[workload] = row
        return row

    def add(self, change: ch.Change, at: float) -> None:
        """Apply one change (``at``: its time in Unix seconds)."""
        match change:
            case ch.Admitted():
                self.admitted(change, at)
            case ch.Preempted():
                self.preempted(change, at)
            case ch.Finished():
                row = self.row(change.workload, "admitted")
                if row is not None:
                    row.update(state="finished", finished_at=at)
                    self.event(at, "finish", change.workload, row["team"], {})
            case ch.PendingReasonChanged():
                details = {
                    "reason": str(change.reason),
                    "category": change.reason.category,
                    "position": change.position,
                }
                self.event(at, "pending", change.workload, change.team, details)
            case ch.NodeJoined():
                name = change.node
                upsert_node(self.conn, self.nodes[name], self.node_info[name], at)
                self.event(at, "node", None, None, {"action": "join", "node": name})
            case ch.NodeLeft():
                self.left(change, at)
            case ch.Warned():
                self.event(at, "warning", None, None, {"message": change.message})
            case ch.AutoscalerEvent():
                self.event(at, change.event, None, None, dict(change.details))
            case _:
                assert_never(change)

    def admitted(self, change: ch.Admitted, at: float) -> None:
        row = self.row(change.workload.name, "pending")
        if row is None:
            return
        assignment = assignment_json(change.assignment)
        borrowed = {k: to_number(v) for k, v in sorted(change.borrowed.items()) if v}
        row.update(state="admitted", admitted_at=at, assignment=assignment, borrowed=borrowed)
        row["first"] = row["first"] or at
        details = {
            "flavors": list(dict.fromkeys(change.assignment.flavors)),
            "nodes": sorted(change.assignment.nodes),
            "borrowed": borrowed,
        }
        self.event(at, "admit", change.workload.name, change.workload.team, details)

    def preempted(self, change: ch.Preempted, at: float) -> None:
        row = self.row(change.workload, "admitted")
        if row is None:
            return
        row.update(state="pending", pending_since=at, admitted_at=None)
        row.update(assignment=None, borrowed=None, preempted=row["preempted"] + 1)
        details = {
            "by": change.by,
            "by_team": change.by_team,
            "reason": change.reason,
            "message": change.message,
        }
        self.event(at, "preempt", change.workload, change.team, details)

    def left(self, change: ch.NodeLeft, at: float) -> None:
        message = change.reason.message
        nodes = tables.nodes
        self.conn.execute(
            nodes.update()
            .where(nodes.c.name == change.node, nodes.c.left_at.is_(None))
            .values(left_at=at, leave_reason=message)
        )
        details = {"action": "leave", "node": change.node, "reason": message}
        self.event(at, "node", None, None, details)

    def flush(self) -> None:
        """The batched UPDATE of the touched rows and the INSERT of the events."""
        conn = self.conn
        postgresql = conn.dialect.name == "postgresql"
        rows = list(self.touched.values())
        if rows and postgresql:
            pg_writes.update_workloads(conn, rows)
        elif rows:
            conn.execute(_ROW_UPDATE, [_bound(r) for r in rows])
        if self.events and postgresql:
            pg_writes.insert_events(conn, self.events)
        elif self.events:
            conn.execute(tables.events.insert(), self.events)


def _bound(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "b_name": row["name"],
        "b_state": row["state"],
        "b_pending_since": row["pending_since"],
        "b_admitted_at": row["admitted_at"],
        "b_first": row["first"],
        "b_finished_at": row["finished_at"],
        "b_assignment": row["assignment"],
        "b_borrowed": row["borrowed"],
        "b_preempted": row["preempted"],
    }


def _read_rows(conn: Connection, names: set[str]) -> dict[str, dict[str, Any]]:
    w = tables.workloads
    columns = [w.c.name, w.c.team, w.c.state, w.c.pending_since, w.c.admitted_at]
    columns += [w.c.finished_at, w.c.assignment, w.c.borrowed]
    rows: dict[str, dict[str, Any]] = {}
    listed = sorted(names)
    for i in range(0, len(listed), CHUNK):
        for r in conn.execute(select(*columns).where(named(conn, w.c.name, listed[i : i + CHUNK]))):
            rows[r.name] = {**r._mapping, "first": None, "preempted": 0}
    return rows


def write_changes(
    conn: Connection,
    changes: Sequence[ch.Change],
    unix: Callable[[float], float],
    nodes: Mapping[str, Node],
    node_info: Mapping[str, NodeInfo],
) -> None:
    """Write one step's changes (see the module's doc); ``unix`` turns loop times into Unix
    seconds, ``nodes`` and ``node_info`` give a joined node's row."""
    names = {c.workload.name for c in changes if isinstance(c, ch.Admitted)}
    names.update(c.workload for c in changes if isinstance(c, ch.Preempted | ch.Finished))
    batch = _Batch(conn, nodes, node_info, _read_rows(conn, names))
    for change in changes:
        batch.add(change, unix(change.at))
    batch.flush()
