"""Replay a scenario through the service's control plane on a virtual clock.

The plane (:class:`~fleetshare.service.plane.ControlPlane`, its store on SQLite) runs on a
:class:`~fleetshare.control.clock.VirtualClock`: each workload is submitted through the plane's
own submission path (:meth:`ControlPlane.submit`, a committed row and its ``submit`` event) at
its submit time (a workload of the scenario's ``manifests:`` as the manifest route of ``POST
/api/v1/workloads`` reads its objects, :func:`manifest_inputs`), each node event of the
scenario (cordon, uncordon) is an admin's node action (:meth:`ControlPlane.node_action`) at
its time, each policy change is an admin's ``PUT /api/v1/policy`` at its time (the endpoint's
own parsing, :func:`parse_policy`, and :meth:`ControlPlane.set_policy`: a new policy version
in the store), and the clock moves to each input and each of the plane's timers (a finish, a
node joining, a guard expiring) in turn, with a :meth:`ControlPlane.step` at each.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import select, update

from fleetshare.control.clock import VirtualClock
from fleetshare.manifests.kinds.base import POD_GROUP_LABEL
from fleetshare.manifests.parse import DURATION_ANNOTATION
from fleetshare.scenario.loader import Scenario, load_scenario_data
from fleetshare.scenario.schema import ManifestEntrySpec, NodeEvent, PolicyChange, WorkloadSpec
from fleetshare.service import store as tables
from fleetshare.service.api_policy import PolicyIn, parse_policy
from fleetshare.service.auth import Principal
from fleetshare.service.client import split_submissions
from fleetshare.service.plane import ControlPlane
from fleetshare.service.store import Store
from fleetshare.service.submission import manifest
from tests.decision_stream import Outcome, Recorder

ADMIN = Principal(1, "admin")
SCENARIO_ONLY = ("workloads", "manifests", "manifest_defaults", "policy_changes", "expect",
                 "until")  # fmt: skip
"""What a scenario has that a service's config does not (cluster events are dropped apart)."""


def service_config(data: dict[str, Any], base: Path) -> Scenario:
    """The service's config of a scenario document: its cluster, policy and node pools."""
    config = {k: v for k, v in data.items() if k not in SCENARIO_ONLY}
    cluster = {k: v for k, v in (data.get("cluster") or {}).items() if k != "events"}
    return load_scenario_data({**config, "cluster": cluster}, base)


@dataclass(frozen=True)
class Objects:
    """The Kubernetes objects of one workload, as a submission's body."""

    body: Any


Input = NodeEvent | PolicyChange | WorkloadSpec | Objects


def entry_objects(entry: Any, base: Path) -> list[dict[str, Any]]:
    """The objects of a ``manifests:`` entry (a file, YAML text, an object, or an entry with
    settings), a copy, an entry's ``duration`` written into each object as fleetshare's
    annotation (what a submission of the objects says it with) unless the object gives its
    own. (An entry's ``queue`` and the scenario's ``manifest_defaults`` are not written: no
    scenario replayed gives them.)"""
    duration = None
    if isinstance(entry, dict) and not ("apiVersion" in entry or "kind" in entry):
        spec = ManifestEntrySpec.model_validate(entry)
        duration = spec.duration
        entry = spec.file if spec.file is not None else spec.manifest
    if isinstance(entry, str):
        text = entry if "\n" in entry.strip() else (base / entry.strip()).read_text()
        objects = [d for d in yaml.safe_load_all(text) if d]
    else:
        objects = [copy.deepcopy(entry)]
    for obj in objects:
        annotations = obj.setdefault("metadata", {}).setdefault("annotations", {})
        if duration is not None:
            annotations.setdefault(DURATION_ANNOTATION, f"{duration:g}")
    return objects


def manifest_inputs(scenario: Scenario, base: Path) -> list[tuple[float, Objects]]:
    """Each workload of the scenario's manifests as the body of its own submission (as
    ``fleetshare job submit FILE`` splits a file: a pod group's pods together), at the submit
    time the scenario gives it (the route takes a submission's time as it comes)."""
    submit_at = {w.name: w.submit_time for w in scenario.workloads}
    objects = [o for entry in scenario.spec.manifests for o in entry_objects(entry, base)]
    out = []
    for body in split_submissions(objects) if objects else ():
        first = body[0] if isinstance(body, list) else body
        labels = first["metadata"].get("labels") or {}
        name = labels.get(POD_GROUP_LABEL) or first["metadata"]["name"]
        out.append((submit_at[name], Objects(body)))
    return out


def inputs_of(scenario: Scenario, base: Path) -> list[tuple[float, int, int, Input]]:
    """The scenario's node events (cordon and uncordon: what an admin does through the API),
    policy changes and submissions in the order the runner applies them: by time, node events
    and policy changes before submissions, then in the scenario's order (the workloads, then
    those of the manifests)."""
    events = [(e.at, 0, i, e) for i, e in enumerate(scenario.events)]
    if any(e.action not in ("cordon", "uncordon") for e in scenario.events):
        raise ValueError("the service's API cordons and uncordons nodes, nothing else")
    changes = [(c.at, 1, i, c) for i, c in enumerate(scenario.spec.policy_changes)]
    specs: list[tuple[float, int, int, Input]] = [
        (w.submit_at, 2, i, w) for i, w in enumerate(scenario.spec.workloads)
    ]
    first = len(specs)
    specs += [(at, 2, first + i, o) for i, (at, o) in enumerate(manifest_inputs(scenario, base))]
    return sorted([*events, *changes, *specs], key=lambda item: item[:3])


def policy_body(scenario: Scenario, index: int) -> PolicyIn:
    """The admin's ``PUT /api/v1/policy`` body for the scenario's policy change ``index``: the
    policy as the scenario gives it (fleetshare's format; Kueue YAML or HyperPod JSON, inline);
    the policy it loads to, in fleetshare's format, when the scenario overrides an imported
    policy (``policy_overrides``: the endpoint has no such field) or names a file."""
    spec = scenario.spec
    change = spec.policy_changes[index]
    if change.policy is not None:
        return PolicyIn(policy=change.policy)
    source = change.kueue if change.kueue is not None else change.hyperpod
    if (not isinstance(source, str) or "\n" in source.strip()) and not spec.policy_overrides:
        fmt = "kueue" if change.kueue is not None else "hyperpod"
        return PolicyIn(format=fmt, policy=source, borrow_limit_reading=spec.hyperpod_borrow_limit)
    # the loader keeps the changes sorted by time (a stable sort of the scenario's order)
    order = sorted(range(len(spec.policy_changes)), key=lambda i: spec.policy_changes[i].at)
    _, loaded = scenario.policy_changes[order.index(index)]
    return PolicyIn(policy=loaded.model_dump(mode="json"))


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


def store_from(db: Path, clock_start: float) -> Store:
    """A fresh SQLite store at ``db`` whose epoch (t = 0 of the plane's loop, Unix seconds) is
    ``clock_start``: the scenario's t = 0, as the runner reads its cron schedules (disruption
    budgets). A store takes the wall clock at its creation, so the time of day of the
    service's t = 0 would be whenever the test runs."""
    store = Store(f"sqlite:///{db}")
    store.create()
    with store.write("migrate") as conn:
        meta = tables.meta
        conn.execute(update(meta).where(meta.c.key == "epoch").values(value=repr(clock_start)))
    return store


def replay(
    scenario: Scenario, base: Path, config: Scenario, db: Path, until: float
) -> tuple[Recorder, Outcome, list[Written]]:
    """Submit ``scenario``'s workloads (its files relative to ``base``) to a plane of
    ``config`` on a fresh SQLite store ``db``
    at their submit times (in submission order: time, then the scenario's order) and step it
    at each submission and timer up to ``until``; what its loop decided, where the work was
    left, and the admissions and preemptions its store recorded."""
    clock = VirtualClock()
    store = store_from(db, config.spec.autoscaler.clock_start.timestamp())
    plane = ControlPlane(config, store, clock=clock)
    try:
        assert plane.loop is not None, "the only replica holds the lease"
        recorder = Recorder.attach(plane.loop, clock.now)
        inputs = inputs_of(scenario, base)
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
                _, _, index, item = inputs.pop(0)
                if isinstance(item, NodeEvent):
                    for node in item.nodes:
                        plane.node_action(node, item.action, ADMIN)
                elif isinstance(item, PolicyChange):
                    body = policy_body(scenario, index)
                    original = None if body.format == "fleetshare" else body.policy
                    plane.set_policy(parse_policy(body, plane), body.format, original, ADMIN)
                elif isinstance(item, Objects):  # the manifest route's reading of them
                    plane.submit(manifest(item.body, plane.policy, ADMIN).spec, ADMIN)
                else:
                    plane.submit(item, ADMIN)
            plane.step()
    finally:
        plane.close()
