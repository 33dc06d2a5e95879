"""What-if: the simulator on the service's current state and recent history, under the policy
in force and under a proposed one, compared.

Both runs start from the same moment, *now*, on a virtual clock:

- **the cluster now**: the nodes the loop sees (autoscaled ones included, as fixed nodes),
  and, when there are node pools (the ones in force), the autoscaler over them;
- **running work** stays where it runs, admitted at 0 (its admission time kept relative to
  now, so preemption guards such as a minimum run time still hold), and finishes when it
  would (its declared duration from its admission; none: it runs through the horizon);
- **pending work** is submitted at 0, in submit order;
- **recent history, replayed**: every workload submitted in the last ``hours`` (whatever
  became of it) is submitted again, shifted by ``hours`` (what came at now − 3 h comes at
  +1 h of a 4 h horizon): the next hours are assumed to bring what the last ones brought.
  Their names get ``~replay``.

Each run simulates ``hours`` at most and stops earlier when its wall-clock budget
(:data:`WALL_BUDGET_SECONDS`) is spent; every running workload takes part, and pending and
replayed work up to ``max_workloads`` in all (pending oldest first, then the replay newest
first). The response says what was left out. Work of a team the proposed policy drops is
left out of the proposed run (a note says so); a priority class it drops keeps the workload's
weight.

Numbers come from :func:`fleetshare.simulate.metrics.measure` and ``summarize`` (the
``fleetshare simulate`` definitions), for the cluster's GPUs (CPUs without GPUs): per team
workloads admitted in the horizon, queue wait p50/p99 (work never admitted counts with its
wait so far, a lower bound), borrowed hours (∫ usage beyond quota), preemptions suffered;
cluster allocation (used / schedulable capacity over the horizon).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import select

from fleetshare.governance.snapshot import Running
from fleetshare.model.workload import Workload
from fleetshare.policy.schema import Policy
from fleetshare.scenario.loader import Scenario, ScenarioError, build_workload
from fleetshare.scenario.runner import Runner, WorkloadRecord
from fleetshare.scenario.schema import WorkloadSpec
from fleetshare.service import store as tables
from fleetshare.service.plane import ControlPlane, View
from fleetshare.simulate.metrics import measure, measured_resource, summarize
from fleetshare.simulate.variants import stand_in_types

MAX_HOURS = 24.0
"""The longest horizon (and history) simulated."""
MAX_WORKLOADS = 2000
"""The most workloads in one run (running, pending and replayed together)."""
WALL_BUDGET_SECONDS = 10.0
"""Wall-clock seconds each of the two runs may take before it stops where it is."""
REPLAY = "~replay"


class Busy(Exception):
    """Another what-if is running (one at a time)."""


class NoPrice(Exception):
    """The cluster's nodes cannot be priced or measured."""


@dataclass
class Inputs:
    """What both runs share."""

    now: float
    hours: float
    running: list[tuple[Running, float | None]]
    """Running work and its remaining run time (None: no declared duration)."""
    pending: list[Workload]
    replay: list[Workload]
    left_out: dict[str, int] = field(default_factory=dict)


class _Runner(Runner):
    """The scenario runner, started with work already running and a wall-clock budget."""

    def __init__(
        self, scenario: Scenario, running: list[tuple[Running, float | None]], deadline: float
    ) -> None:
        super().__init__(scenario)
        self.deadline = deadline
        self.stopped_at: float | None = None
        if self.autoscaler is not None:
            # the live autoscaler's nodes are here as fixed nodes: number new ones past theirs
            # (POOL-TYPE-N), so that a launch in the simulation never takes an existing name
            numbers = [n.rsplit("-", 1)[-1] for n in self.nodes]
            self.autoscaler.number_after(max([int(n) for n in numbers if n.isdigit()] + [0]))
        for entry, remaining in running:
            wl = entry.workload
            self.records[wl.name] = WorkloadRecord(
                wl,
                state="admitted",
                admitted_at=0.0,
                first_admitted_at=0.0,
                flavors=entry.assignment.flavors,
                placement=entry.assignment.placement,
            )
            self.resume(entry, remaining)
            self._log(0.0, "admit", workload=wl.name, flavors=[], borrowed={})

    def _settled(self, now: float) -> None:
        if time.monotonic() > self.deadline:
            self.stopped_at = now
            self.clear_timers()


_one_at_a_time = threading.Lock()


def gather(plane: ControlPlane, hours: float, max_workloads: int) -> Inputs:
    """The current state (from the loop's latest view) and the replay (from the store)."""
    view: View = plane.current_view()
    now = plane.clock.now()
    running: list[tuple[Running, float | None]] = []
    for entry in sorted(view.running.values(), key=lambda r: r.admitted_at):
        elapsed = max(0.0, now - entry.admitted_at)
        wl = replace(entry.workload, submit_time=entry.workload.submit_time - now)
        remaining = None if wl.duration is None else max(1.0, wl.duration - elapsed)
        running.append((Running(wl, entry.assignment, -elapsed), remaining))
    pending = [replace(w, submit_time=0.0) for w in view.pending.values()]
    pending.sort(key=lambda w: w.created)
    left_out: dict[str, int] = {}
    room = max(0, max_workloads - len(running))
    if len(pending) > room:
        left_out["pending"] = len(pending) - room
        pending = pending[:room]
    room -= len(pending)
    since = plane.unix(now) - hours * 3600
    w = tables.workloads
    with plane.store.read("what-if-read") as conn:
        rows = conn.execute(
            select(w.c.name, w.c.team, w.c.spec, w.c.priority, w.c.priority_class, w.c.submitted_at)
            .where(w.c.submitted_at >= since)
            .order_by(w.c.id.desc())
            .limit(room + 1)
        ).all()
        if len(rows) > room:
            total = conn.execute(select(w.c.id).where(w.c.submitted_at >= since)).all()
            left_out["replay"] = len(total) - room
            rows = rows[:room]
    replay = []
    for row in reversed(rows):  # oldest first: creation order is submit order
        spec = WorkloadSpec.model_validate(row.spec)
        try:
            built = build_workload(spec, plane.policy, row.name, resolve_teams=False)
        except ScenarioError:  # its priority class is gone: its weight stays
            spec = spec.model_copy(update={"priority": None})
            built = build_workload(spec, plane.policy, row.name, resolve_teams=False)
        replay.append(
            replace(
                built,
                name=row.name + REPLAY,
                team=row.team,
                priority=row.priority,
                priority_class=row.priority_class,
                submit_time=max(0.0, row.submitted_at - since),
            )
        )
    return Inputs(now, hours, running, pending, replay, left_out)


def _for_policy(
    inputs: Inputs, policy: Policy, notes: list[str], label: str
) -> tuple[list[tuple[Running, float | None]], list[Workload]]:
    """The work of ``inputs`` as ``policy`` sees it: teams it drops left out, priorities
    re-resolved (a class it drops keeps its weight)."""
    teams = {t.name for t in policy.teams}
    dropped: dict[str, int] = {}
    missing: set[str] = set()

    def fit(w: Workload) -> Workload | None:
        if w.team not in teams:
            dropped[w.team] = dropped.get(w.team, 0) + 1
            return None
        try:
            return replace(w, priority=policy.priority_of(w.priority_class))
        except KeyError:
            missing.add(str(w.priority_class))
            return w

    running = []
    for entry, remaining in inputs.running:
        wl = fit(entry.workload)
        if wl is not None:
            running.append((replace(entry, workload=wl), remaining))
    work = [f for w in (*inputs.pending, *inputs.replay) if (f := fit(w)) is not None]
    for team, count in sorted(dropped.items()):
        notes.append(f"{label}: team {team} is not in the policy; its {count} workloads left out")
    for name in sorted(missing):
        notes.append(f"{label}: priority class {name} is not in the policy; its weight kept")
    return running, work


def _scenario(plane: ControlPlane, policy: Policy, work: list[Workload], hours: float) -> Scenario:
    config = plane.config
    spec = config.spec.model_copy(
        update={
            "name": "what-if",
            "policy": policy.model_dump(mode="json", exclude_defaults=True),
            "kueue": None,
            "hyperpod": None,
            "workloads": [],
            "manifests": [],
            "policy_changes": [],
            "node_pools": plane.pools_in_force()[1],
            "until": hours * 3600,
        }
    )
    return Scenario(
        name="what-if",
        description="",
        nodes=list(plane.view.nodes),
        events=[],
        policy=policy,
        workloads=work,
        policy_changes=[],
        until=hours * 3600,
        expect={},
        catalog=plane.catalog,
        spec=spec,
    )


def _numbers(team: dict[str, Any]) -> dict[str, Any]:
    waits = team["queue_wait_seconds"]
    return {
        "workloads": team["workloads"],
        "admitted": team["workloads"] - team["never_admitted"],
        "never_admitted": team["never_admitted"],
        "wait_p50_seconds": waits["p50"],
        "wait_p99_seconds": waits["p99"],
        "borrowed_hours": team["borrowed_hours"],
        "used_hours": team["used_hours"],
        "preemptions": team["preemptions"],
    }


def _run(
    plane: ControlPlane, inputs: Inputs, policy: Policy, label: str, notes: list[str]
) -> dict[str, Any]:
    running, work = _for_policy(inputs, policy, notes, label)
    scenario = _scenario(plane, policy, work, inputs.hours)
    runner = _Runner(scenario, running, time.monotonic() + WALL_BUDGET_SECONDS)
    result = runner.run()
    nodes = list(plane.view.nodes)
    requests = [w.total_requests() for w in work]
    requests += [e.workload.total_requests() for e, _ in running]
    resource = measured_resource(nodes, requests)
    horizon = inputs.hours * 3600
    try:
        stand_in = stand_in_types(nodes, plane.catalog) if nodes else {"cpu": "m5.large"}
        measured = measure(
            result,
            resource=resource,
            catalog=plane.catalog,
            stand_in=stand_in,
            duration=horizon,
        )
    except (ValueError, KeyError) as exc:
        raise NoPrice(f"cannot measure the cluster: {exc}") from None
    cluster, teams = summarize(measured)
    waits = cluster["queue_wait_seconds"]
    simulated = result.end_time if runner.stopped_at is None else runner.stopped_at
    return {
        "resource": resource,
        "simulated_hours": round(min(simulated, horizon) / 3600, 4),
        "stopped_early": runner.stopped_at is not None,
        "cluster": {
            "utilisation": cluster["allocation"],
            "used_hours": cluster["used_hours"],
            "available_hours": cluster["available_hours_in_window"],
            "workloads": cluster["workloads"],
            "admitted": cluster["workloads"] - cluster["never_admitted"],
            "never_admitted": cluster["never_admitted"],
            "wait_p50_seconds": waits["p50"],
            "wait_p99_seconds": waits["p99"],
            "borrowed_hours": cluster["borrowed_hours"],
            "preemptions": cluster["preemptions"],
            "cost_usd": round(cluster["cost_in_window_usd"], 4),
        },
        "teams": {name: _numbers(t) for name, t in teams.items()},
    }


def what_if(
    plane: ControlPlane, proposed: Policy, hours: float, max_workloads: int
) -> dict[str, Any]:
    """Run the current and the proposed policy on the same inputs; the comparison."""
    if not _one_at_a_time.acquire(blocking=False):
        raise Busy("another what-if is running; try again when it is done")
    try:
        started = time.monotonic()
        inputs = gather(plane, hours, max_workloads)
        notes: list[str] = []
        current = _run(plane, inputs, plane.policy, "current", notes)
        new = _run(plane, inputs, proposed, "proposed", notes)
    finally:
        _one_at_a_time.release()
    names = list(current["teams"])
    names += [n for n in new["teams"] if n not in names]
    for run, label in ((current, "current"), (new, "proposed")):
        if run["stopped_early"]:
            notes.append(
                f"{label}: stopped after {WALL_BUDGET_SECONDS:g} s of wall time at "
                f"{run['simulated_hours']:g} h of {hours:g} h simulated"
            )
    return {
        "hours": hours,
        "resource": current["resource"],
        "started_at": plane.datetime(plane.unix(inputs.now)),
        "seconds": round(time.monotonic() - started, 3),
        "bounds": {
            "max_hours": MAX_HOURS,
            "max_workloads": max_workloads,
            "wall_budget_seconds_per_run": WALL_BUDGET_SECONDS,
            "running": len(inputs.running),
            "pending": len(inputs.pending),
            "replayed": len(inputs.replay),
            "left_out": inputs.left_out,
        },
        "current": {k: current[k] for k in ("simulated_hours", "stopped_early", "cluster")},
        "proposed": {k: new[k] for k in ("simulated_hours", "stopped_early", "cluster")},
        "teams": [
            {"team": n, "current": current["teams"].get(n), "proposed": new["teams"].get(n)}
            for n in names
        ],
        "notes": notes,
        "assumptions": [
            "Starts now: running work stays where it runs and finishes when it would; pending "
            "work is submitted at 0; the workloads submitted in the last "
            f"{hours:g} h are submitted again, {hours:g} h later (named ~replay).",
            "No checkpointing: preempted work restarts from scratch; work without a declared "
            "duration runs through the horizon.",
            "Queue waits of work never admitted count until the horizon (a lower bound); "
            "borrowed hours are usage beyond quota over time; utilisation is used / "
            "schedulable capacity over the horizon; cost is the nodes' hourly price over it.",
        ],
    }
