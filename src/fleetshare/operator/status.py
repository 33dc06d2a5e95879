"""Each Team's status: quota, used and borrowed per resource, from the quota tree of the
current policy over the admitted workloads (the numbers ``kubectl get teams`` shows)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from fleetshare.governance.admission import Engine
from fleetshare.governance.snapshot import Running, Snapshot
from fleetshare.governance.state import CycleState
from fleetshare.model.node import Node
from fleetshare.model.quantity import format_quantity
from fleetshare.model.workload import Workload


def _text(amounts: dict[str, int]) -> str:
    return ",".join(f"{r}={format_quantity(v, r)}" for r, v in sorted(amounts.items())) or "-"


def team_status(
    engine: Engine,
    nodes: Sequence[Node],
    running: Sequence[Running],
    pending: Sequence[Workload],
    now: float,
) -> dict[str, dict[str, Any]]:
    """Per team name, its ``status`` (quantities as Kubernetes quantity strings)."""
    state = CycleState(
        engine.model, engine.policy.cluster, Snapshot(now, list(nodes), list(running), [])
    )
    tree = state.tree
    admitted = Counter(r.workload.team for r in running)
    waiting = Counter(w.team for w in pending)
    out: dict[str, dict[str, Any]] = {}
    for team in engine.model.teams:
        totals: dict[str, dict[str, int]] = {"quota": {}, "used": {}, "borrowed": {}}
        for fr in sorted(engine.model.governed):
            _, resource = fr
            for kind, value in (
                ("quota", tree.quota(team, fr)),
                ("used", tree.usage(team, fr)),
                ("borrowed", tree.borrowed(team, fr)),
            ):
                if value:
                    totals[kind][resource] = totals[kind].get(resource, 0) + value
        status: dict[str, Any] = {
            kind: {r: format_quantity(v, r) for r, v in sorted(amounts.items())}
            for kind, amounts in totals.items()
        }
        for kind, amounts in totals.items():
            status[f"{kind}Text"] = _text(amounts)
        status["admitted"] = admitted[team]
        status["pending"] = waiting[team]
        out[team] = status
    return out


def status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch that turns a Team's ``old`` status into ``new``: a merge patch
    keeps every map key it does not name, so a resource that went to zero (``used`` after a
    team's work finished, ``borrowed`` after a reclaim) is named with null, which removes it
    (RFC 7386); else ``kubectl get team`` kept showing what the team no longer holds."""
    patch = dict(new)
    for kind in ("quota", "used", "borrowed"):
        gone = set(old.get(kind) or {}) - set(new.get(kind) or {})
        if gone:
            patch[kind] = {**(new.get(kind) or {}), **dict.fromkeys(sorted(gone))}
    return patch
