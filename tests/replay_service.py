"""Replay a scenario through the service's control plane on a virtual clock.

The plane (:class:`~fleetshare.service.plane.ControlPlane`, its store on SQLite) runs on a
:class:`~fleetshare.control.clock.VirtualClock`: each workload is submitted through the plane's
own submission path (:meth:`ControlPlane.submit`, a committed row and its ``submit`` event) at
its submit time, each node event of the scenario (cordon, uncordon) is an admin's node action
(:meth:`ControlPlane.node_action`) at its time, and the clock moves to each input and each of
the plane's timers (a finish, a node joining, a guard expiring) in turn, with a
:meth:`ControlPlane.step` at each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from fleetshare.control.clock import VirtualClock
from fleetshare.scenario.loader import Scenario, load_scenario_data
from fleetshare.scenario.schema import NodeEvent, WorkloadSpec
from fleetshare.service import store as tables
from fleetshare.service.auth import Principal
from fleetshare.service.plane import ControlPlane
from fleetshare.service.store import Store
from tests.decision_stream import Outcome, Recorder

ADMIN = Principal(1, "admin")
SCENARIO_ONLY = ("workloads", "policy_changes", "expect", "until")
"""What a scenario has that a service's config does not (cluster events are dropped apart)."""


def service_config(data: dict[str, Any], base: Path) -> Scenario:
    """The service's config of a scenario document: its cluster, policy and node pools."""
    config = {k: v for k, v in data.items() if k not in SCENARIO_ONLY}
    cluster = {k: v for k, v in (data.get("cluster") or {}).items() if k != "events"}
    return load_scenario_data({**config, "cluster": cluster}, base)


def inputs_of(scenario: Scenario) -> list[tuple[float, int, int, NodeEvent | WorkloadSpec]]:
    """The scenario's node events (cordon and uncordon: what an admin does through the API)
    and submissions in the order the runner applies them: by time, node events before
    submissions, then in the scenario's order."""
    events = [(e.at, 0, i, e) for i, e in enumerate(scenario.events)]
    if any(e.action not in ("cordon", "uncordon") for e in scenario.events):
        raise ValueError("the service's API cordons and uncordons nodes, nothing else")
    specs = [(w.submit_at, 1, i, w) for i, w in enumerate(scenario.spec.workloads)]
    return sorted([*events, *specs], key=lambda item: item[:3])


Written = tuple[float, str, str, str]
"""An admission or preemption as the service's store has it: its time (loop seconds), its
kind (``admit``, ``preempt``), the workload, the preemption's reason category."""


def written(plane: ControlPlane) -> list[Written]:
    """The admissions and preemptions the plane wrote to its store's event log, in order."""
    e = tables.events
    with plane.store.read("agreement") as conn:
        rows = conn.execute(
            select(e.c.at, e.c.kind, e.c.workload, e.c.details)
            .where(e.c.kind.in_(("admit", "preempt")))
            .order_by(e.c.id)
        ).all()
    return [
        (r.at - plane.epoch, r.kind, r.workload, (r.details or {}).get("reason", "")) for r in rows
    ]


def replay(
    scenario: Scenario, config: Scenario, db: Path, until: float
) -> tuple[Recorder, Outcome, list[Written]]:
    """Submit ``scenario``'s workloads to a plane of ``config`` on a fresh SQLite store ``db``
    at their submit times (in submission order: time, then the scenario's order) and step it
    at each submission and timer up to ``until``; what its loop decided, where the work was
    left, and the admissions and preemptions its store recorded."""
    clock = VirtualClock()
    plane = ControlPlane(config, Store(f"sqlite:///{db}"), clock=clock)
    try:
        assert plane.loop is not None, "the only replica holds the lease"
        recorder = Recorder.attach(plane.loop)
        inputs = inputs_of(scenario)
        while True:
            times = [t for t in (plane.backend.next_timer(),) if t is not None]
            if inputs:
                times.append(inputs[0][0])
            if not times or min(times) > until:
                view = plane.view
                left = Outcome(frozenset(view.running), frozenset(view.pending))
                return recorder, left, written(plane)
            now = max(min(times), clock.now())
            clock.advance_to(now)
            while inputs and inputs[0][0] <= now:
                _, _, _, item = inputs.pop(0)
                if isinstance(item, NodeEvent):
                    for node in item.nodes:
                        plane.node_action(node, item.action, ADMIN)
                else:
                    plane.submit(item, ADMIN)
            plane.step()
    finally:
        plane.close()
