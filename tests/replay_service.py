"""Replay a scenario through the service's control plane on a virtual clock.

The plane (:class:`~fleetshare.service.plane.ControlPlane`, its store on SQLite) runs on a
:class:`~fleetshare.control.clock.VirtualClock`: each workload is submitted through the plane's
own submission path (:meth:`ControlPlane.submit`, a committed row and its ``submit`` event) at
its submit time, and the clock moves to each submission and each of the plane's timers (a
finish, a node joining, a guard expiring) in turn, with a :meth:`ControlPlane.step` at each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetshare.control.clock import VirtualClock
from fleetshare.scenario.loader import Scenario, load_scenario_data
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


def replay(
    scenario: Scenario, config: Scenario, db: Path, until: float
) -> tuple[Recorder, Outcome]:
    """Submit ``scenario``'s workloads to a plane of ``config`` on a fresh SQLite store ``db``
    at their submit times (in submission order: time, then the scenario's order) and step it
    at each submission and timer up to ``until``; what its loop decided, and where the work
    was left."""
    clock = VirtualClock()
    plane = ControlPlane(config, Store(f"sqlite:///{db}"), clock=clock)
    try:
        assert plane.loop is not None, "the only replica holds the lease"
        recorder = Recorder.attach(plane.loop)
        specs = scenario.spec.workloads
        order = sorted(range(len(specs)), key=lambda i: (specs[i].submit_at, i))
        queue = [specs[i] for i in order]
        while True:
            times = [t for t in (plane.backend.next_timer(),) if t is not None]
            if queue:
                times.append(queue[0].submit_at)
            if not times or min(times) > until:
                view = plane.view
                return recorder, Outcome(frozenset(view.running), frozenset(view.pending))
            now = max(min(times), clock.now())
            clock.advance_to(now)
            while queue and queue[0].submit_at <= now:
                plane.submit(queue.pop(0), ADMIN)
            plane.step()
    finally:
        plane.close()
