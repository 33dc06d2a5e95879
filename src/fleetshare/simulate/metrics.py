"""Metrics of one simulated run, computed after the run from its event log.

Nothing here runs inside the simulation: :func:`measure` reads ``RunResult.events`` (admit,
preempt, finish and node events, each with its time ``at``), the workload records and the
autoscaler's node records, and sweeps them once (sorting: ``O(E log E)`` for ``E`` events)
into step functions and arrays (:class:`Measured`); :func:`summarize` turns those into numbers.

Two spans of time: the *window* ``[0, W]`` the input covers (the trace's days), the same for
every policy; and the *run* ``[0, T]``: each run goes on until its admitted work is done (and,
autoscaled, its last node is gone), ``T ≥ W``. The *makespan* is when its last job finished.

Definitions (``r`` is a workload's request of the measured resource, in whole units):

- **used** -- ``Σ r × (end − admitted)`` over every run of every workload, where ``end`` is its
  finish, its preemption, or the end of the simulation. Work later preempted counts: the
  capacity was held. **lost** is the part that ended in a preemption (the job restarts from
  scratch when admitted again).
- **allocation** -- used / available *within the window*, where available is ``∫ capacity``
  of schedulable nodes (Ready, healthy, not cordoned): how busy the cluster was while the
  trace's demand was there. Measured over the same span for every policy. **Useful
  allocation** leaves out lost work (what preemption threw away): (used − lost) / available,
  both within the window; it is the headline, since capacity spent on work that is thrown away
  serves nobody. For a fixed cluster the denominator is its nodes; for an autoscaled one it is
  the Ready capacity that followed demand, so the two are not comparable (``capacity_basis``
  says which; compare autoscaled runs by utilisation of paid).
- **paid** -- ``∫ capacity`` of the nodes paid for over the run: fixed nodes while present;
  autoscaled instances from launch (before they are Ready) to termination;
  **utilisation of paid** = used / paid.
- **borrowed** -- ``∫ max(0, usage(team) − quota(team))``: what a team used beyond its quota,
  while it did (a job admitted as borrowed stops counting once its team is back within quota).
  **borrowed at admission** -- ``Σ b × (end − admitted)`` where ``b`` is what the admission
  borrowed (the admit event's ``borrowed``), the per-job view Kueue's admission reports; it is
  larger when a team's other work ends first.
- **queue wait** -- all the time a job spent queued: submit to first admission, plus every
  stretch from a preemption to its next admission; time still queued at the end of the run is
  *censored* at ``T`` (a lower bound), and never-admitted work is also counted in
  ``never_admitted``. **first wait** -- submit to first admission only (censored likewise);
  **requeued** -- jobs queued again after a preemption. Percentiles are nearest-rank.
- **completion time** (JCT) -- finish − submit of finished workloads.
- **within quota at submission** (a job submitted at ``t``): the team's work at ``t`` fits
  within its quota -- the requests of its jobs submitted at or before ``t`` and not finished
  by then (running or queued; a finish at ``t`` counts first), the job's own and every other
  job submitted at ``t`` included (jobs submitted together are judged together, whatever
  order the scheduler takes them in). Quota is a guarantee: such a job should start at once
  (under static quotas it does, unless nodes are fragmented), and under sharing it may have to
  wait while the team's lent quota is reclaimed. **in-quota wait** -- the first wait (submit
  to first admission, censored at ``T``) of those jobs: count, mean, nearest-rank p50/p95/p99
  and max.
- **lent** (a team) -- ``∫ min(B, I) × i / I``, where ``i = max(0, quota − usage)`` is the
  team's idle quota, ``I`` the sum of every team's and ``B = Σ max(0, usage − quota)`` what the
  teams used beyond their quotas: borrowed capacity is taken from the idle quota of the teams,
  attributed to each in proportion to its idle quota (Kueue's cohort pools unused quota without
  saying whose; this is the attribution). A team *lent* when this is above 0. Σ lent ≤
  borrowed (equal when the cluster has no capacity beyond the quotas).
- **preemptions in quota** -- preemptions of runs admitted within their team's quota
  (borrowing nothing at admission: the admit event's ``borrowed`` is 0), and **lost in quota**
  the work they threw away: what sharing took from a team's guaranteed work, as against the
  work it had borrowed.
- **cost** -- over the run: fixed nodes at the catalog's on-demand price × hours present in
  ``[0, T]`` (the cluster is released when the work is done); autoscaled: the simulated cloud's
  bill (per-second billing, 60 s minimum per instance). A run that spills far past the window
  (a long job preempted late restarts from scratch) keeps a whole fixed cluster for its tail,
  so **cost in window** -- the price of what was paid for during ``[0, W]`` -- is given too:
  the same for every fixed-cluster policy; **cost after the window** = cost − cost in window:
  the tail spent finishing the work left at the window's end. **spillover** = used − used in
  the window. **utilisation of paid in window** = used in the window / paid in the window.
- **under-provisioning** (autoscaled runs) -- a job is *short of capacity* from the first
  autoscaler step, before its first admission, at which quota would have admitted it but no
  node had room for it (it was the autoscaler's demand), until its first admission (censored at
  ``T``). An **under-provision event** is a maximal span of time during which at least one job
  is short of capacity (spans that overlap or touch are one event); **under-provisioned
  hours** = ``Σ r × time short of capacity`` (GPU-hours of demand kept waiting for capacity);
  **under-provisioned jobs** counts the jobs. Waits after a preemption are not counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from fleetshare.governance.quota import compile_policy
from fleetshare.model.catalog import Catalog
from fleetshare.model.node import Node
from fleetshare.model.quantity import MILLI
from fleetshare.model.resources import GPU
from fleetshare.model.stats import nearest_rank
from fleetshare.scenario.report import autoscaling_summary
from fleetshare.scenario.runner import RunResult
from fleetshare.simulate.variants import node_price

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
HOUR = 3600.0


@dataclass
class Step:
    """A step function from ``times[0] == 0``: ``values[i]`` holds from ``times[i]`` until
    ``times[i + 1]``, the last value for ever; ``values`` may be 2-D (a column per series)."""

    times: FloatArray
    values: FloatArray

    def area(self, until: float) -> Any:
        """``∫_0^until`` (per column): value × seconds."""
        if self.times.size == 0:
            return 0.0 if self.values.ndim == 1 else np.zeros(self.values.shape[1])
        nxt = np.append(self.times[1:], np.inf)
        widths = np.clip(np.minimum(nxt, until) - np.minimum(self.times, until), 0.0, None)
        if self.values.ndim == 1:
            return float((self.values * widths).sum())
        return np.asarray((self.values * widths[:, None]).sum(axis=0), dtype=np.float64)

    def bin_means(self, edges: FloatArray) -> FloatArray:
        """The exact time-weighted mean over each ``[edges[i], edges[i+1])``."""
        values = self.values if self.values.ndim == 2 else self.values[:, None]
        if self.times.size == 0:
            out = np.zeros((edges.size - 1, values.shape[1]))
        else:
            knots = np.append(self.times, max(float(self.times[-1]), float(edges[-1])))
            widths = np.diff(knots)
            area = np.vstack(
                [np.zeros(values.shape[1]), np.cumsum(values * widths[:, None], axis=0)]
            )
            cum = np.column_stack(
                [np.interp(edges, knots, area[:, j]) for j in range(values.shape[1])]
            )
            out = np.diff(cum, axis=0) / np.diff(edges)[:, None]
        return out if self.values.ndim == 2 else out[:, 0]

    def peak(self) -> float:
        """Largest value (of any column)."""
        return float(self.values.max()) if self.values.size else 0.0


def step_from_deltas(times: FloatArray, deltas: FloatArray) -> Step:
    """The running sum of ``deltas`` (one row per time; 1-D or 2-D) as a step function from
    0: one step per distinct time, the level after every delta at that time."""
    order = np.argsort(times, kind="stable")
    t = times[order]
    level = np.cumsum(deltas[order], axis=0)
    if t.size:
        last = np.append(t[1:] != t[:-1], True)
        t, level = t[last], level[last]
    if t.size == 0 or t[0] > 0:
        zero = np.zeros((1, *deltas.shape[1:]))
        t = np.concatenate(([0.0], t))
        level = np.concatenate((zero, level))
    level = np.round(level, 9)  # cancel float noise so that empty reads exactly 0
    return Step(np.asarray(t, dtype=np.float64), np.asarray(level, dtype=np.float64))


@dataclass
class Runs:
    """Every run (admission to finish / preemption / end) of every workload, as arrays."""

    team: IntArray
    workload: IntArray
    """Index of the run's workload in ``Measured.submit`` (-1 for work that was running when
    the run began, never submitted in it)."""
    start: FloatArray
    stop: FloatArray
    amount: FloatArray
    borrowed: FloatArray
    preempted: BoolArray
    reason: list[str]
    """Preemption category of each run ("" when it was not preempted)."""

    def used(self, until: float = np.inf) -> FloatArray:
        """Units × seconds of each run within ``[0, until]``."""
        return np.asarray(
            self.amount * (np.minimum(self.stop, until) - np.minimum(self.start, until)),
            dtype=np.float64,
        )


@dataclass
class Measured:
    """One run, reduced to arrays and step functions (picklable, no engine)."""

    resource: str
    team_names: list[str]
    quota: FloatArray
    runs: Runs
    usage: Step
    """Per-team usage (units), a column per team in ``team_names``."""
    capacity: Step
    """Schedulable capacity (units)."""
    paid: Step
    """Capacity paid for (units): fixed nodes while present, instances launch to end."""
    nodes: Step
    """Nodes paid for."""
    rate: Step
    """USD/hour being paid (fixed nodes at catalog prices, instances at their price)."""
    fixed_rate: Step
    """USD/hour of the fixed (not autoscaled) nodes."""
    cloud_bill: float
    fixed_types: dict[str, tuple[int, float]]
    """Fixed nodes by instance type: (count, USD/hour)."""
    launched: int
    terminated: int
    node_seconds: float
    """Instance-seconds of autoscaled nodes, launch to termination."""
    submit: FloatArray
    first_admit: FloatArray
    """First admission time, NaN for work never admitted."""
    wait_team: IntArray
    wait_priority: IntArray
    finish_team: IntArray
    completion: FloatArray
    window: float
    end: float
    """When the simulation ended (its last event; at least the window)."""
    makespan: float
    """When the last workload finished."""
    autoscaled: bool
    unknown_nodes: list[str] = field(default_factory=list)
    short_since: FloatArray = field(default_factory=lambda: np.zeros(0))
    """Per workload: when it became short of capacity (NaN: never; see under-provisioning)."""
    amount: FloatArray = field(default_factory=lambda: np.zeros(0))
    """Per workload: its request of the measured resource (units)."""
    names: list[str] = field(default_factory=list)
    """Per workload: its name (the order of ``submit``)."""
    finish: FloatArray = field(default_factory=lambda: np.zeros(0))
    """Per workload: when it finished (NaN: never)."""

    def waits(self, horizon: float) -> tuple[FloatArray, BoolArray]:
        """First waits (submit to first admission, censored at ``horizon`` for work never
        admitted) and the censored mask."""
        censored = np.isnan(self.first_admit)
        waits = np.where(censored, horizon - self.submit, self.first_admit - self.submit)
        return np.asarray(waits, dtype=np.float64), censored

    def queue_times(self, horizon: float) -> tuple[FloatArray, BoolArray, IntArray]:
        """Per workload: all its time queued (first wait plus every preemption-to-admission
        stretch, censored at ``horizon`` while still queued), whether it was still queued at
        the end, and how many times it was queued again after a preemption."""
        r = self.runs
        n = self.submit.size
        order = np.lexsort((r.start, r.workload))
        order = order[r.workload[order] >= 0]  # work running from the start never queued
        wl, start, stop = r.workload[order], r.start[order], r.stop[order]
        first = np.ones(wl.size, dtype=np.bool_)
        first[1:] = wl[1:] != wl[:-1]
        previous_stop = np.empty_like(stop)
        previous_stop[1:] = stop[:-1]
        gaps = np.where(first, start - self.submit[wl], start - previous_stop)
        queued = np.bincount(wl, weights=gaps, minlength=n)
        last = np.ones(wl.size, dtype=np.bool_)
        last[:-1] = wl[1:] != wl[:-1]
        ends_queued = last & r.preempted[order]
        queued += np.bincount(wl[ends_queued], weights=horizon - stop[ends_queued], minlength=n)
        never = np.bincount(wl, minlength=n) == 0
        queued = np.where(never, horizon - self.submit, queued)
        still = never.copy()
        still[wl[ends_queued]] = True
        requeues = np.bincount(wl[~first], minlength=n) + np.bincount(wl[ends_queued], minlength=n)
        return np.asarray(queued, dtype=np.float64), still, requeues.astype(np.int64)

    def preemptions(self) -> list[tuple[float, int, str, float]]:
        """(time, team index, cause, units × hours lost) of every preemption."""
        r = self.runs
        lost = r.used() / HOUR
        return [
            (float(r.stop[i]), int(r.team[i]), r.reason[i], float(lost[i]))
            for i in np.flatnonzero(r.preempted)
        ]


@dataclass(frozen=True)
class UnderProvision:
    """Under-provisioning of one run (see the module docstring)."""

    events: int
    jobs: int
    hours: float
    """Units x hours of demand short of capacity (GPU-hours)."""
    span_hours: float
    """Hours during which some job was short of capacity (the events' total length)."""


def under_provision(
    short_since: FloatArray, first_admit: FloatArray, amount: FloatArray, horizon: float
) -> UnderProvision:
    """Events, jobs and units x hours short of capacity: each job from ``short_since`` (NaN:
    never short) to its first admission (NaN: never admitted, censored at ``horizon``)."""
    short = ~np.isnan(short_since)
    start = short_since[short]
    stop = np.where(np.isnan(first_admit[short]), horizon, first_admit[short])
    keep = stop > start
    start, stop = start[keep], stop[keep]
    hours = float(np.sum(amount[short][keep] * (stop - start))) / HOUR
    events = 0
    span = 0.0
    reach = -np.inf
    began = 0.0
    for i in np.argsort(start, kind="stable"):
        if start[i] > reach:  # a gap: a new event
            if events:
                span += reach - began
            events += 1
            began, reach = float(start[i]), float(stop[i])
        else:
            reach = max(reach, float(stop[i]))
    if events:
        span += reach - began
    return UnderProvision(events, int(start.size), hours, span / HOUR)


def within_quota_at_submission(
    submit: FloatArray,
    finish: FloatArray,
    team: IntArray,
    amount: FloatArray,
    quota: FloatArray,
) -> BoolArray:
    """Per workload: whether its team's work at its submission instant ``t`` fits within the
    team's ``quota``: the ``amount`` of every job of the team submitted at or before ``t`` and
    not finished by ``t`` (a finish at ``t`` frees quota first), every job submitted at ``t``
    itself included -- jobs submitted at one instant are judged together, whatever order the
    scheduler takes them in. ``finish`` is NaN for work that never finished."""
    fin = np.where(np.isnan(finish), np.inf, finish)
    out = np.zeros(submit.size, dtype=np.bool_)
    for k in np.unique(team).tolist():
        mine = np.flatnonzero(team == k)
        s, f, r = submit[mine], fin[mine], amount[mine]
        by_submit = np.argsort(s, kind="stable")
        by_finish = np.argsort(f, kind="stable")
        submitted = np.concatenate(([0.0], np.cumsum(r[by_submit])))
        finished = np.concatenate(([0.0], np.cumsum(r[by_finish])))
        level = (
            submitted[np.searchsorted(s[by_submit], s, side="right")]
            - finished[np.searchsorted(f[by_finish], s, side="right")]
        )
        # a job submitted at t that finished at t too (a zero-length one) still counts at t
        instant = f == s
        for i in np.flatnonzero(instant).tolist():
            level[s == s[i]] += r[i]
        out[mine] = level <= quota[k] + 1e-9
    return out


def lent(usage: Step, quota: FloatArray) -> Step:
    """Per team (a column each): the units of its quota that other teams are borrowing, over
    time -- what the teams use beyond their quotas, ``min(B, I)``, shared among the teams in
    proportion to their idle quota ``max(0, quota − usage)`` (see the module docstring)."""
    if usage.values.ndim != 2 or usage.values.size == 0:
        return Step(usage.times, np.zeros((usage.times.size, quota.size)))
    beyond = np.maximum(usage.values - quota[None, :], 0.0).sum(axis=1)
    idle = np.maximum(quota[None, :] - usage.values, 0.0)
    total = idle.sum(axis=1)
    taken = np.minimum(beyond, total)
    share = np.divide(idle, total[:, None], out=np.zeros_like(idle), where=total[:, None] > 0)
    return Step(usage.times, share * taken[:, None])


def with_max(values: FloatArray) -> dict[str, float | None]:
    """:func:`percentiles` and the largest value (None when empty)."""
    return {**percentiles(values), "max": float(values.max()) if values.size else None}


def measured_resource(nodes: Sequence[Node], requests: Sequence[Mapping[str, int]]) -> str:
    """``nvidia.com/gpu`` when nodes or workloads have GPUs, else ``cpu``."""
    if any(n.allocatable.get(GPU, 0) for n in nodes) or any(r.get(GPU, 0) for r in requests):
        return GPU
    return "cpu"


def category(reason: str) -> str:
    """A preemption's category: a ``preempt`` event's ``reason`` is one already (reclaim,
    fair-share, reclaim-while-borrowing, priority, node-failure, node-removed, consolidation,
    empty, repair, expire, drift, spot-interruption); its ``message`` holds the details."""
    return reason or "other"


def percentiles(values: FloatArray) -> dict[str, float | None]:
    """Mean and nearest-rank p50/p95/p99 (None when empty)."""
    if values.size == 0:
        return {"mean": None, "p50": None, "p95": None, "p99": None}

    def rank(q: float) -> float:
        value = nearest_rank(values, q)
        assert value is not None
        return value

    return {
        "mean": float(values.mean()),
        "p50": rank(50),
        "p95": rank(95),
        "p99": rank(99),
    }


def _rounded(d: dict[str, Any], digits: int = 4) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, float):
            out[k] = round(v, digits)
        elif isinstance(v, dict):
            out[k] = _rounded(v, digits)
        else:
            out[k] = v
    return out


def extract_runs(
    result: RunResult,
    resource: str,
    team_index: Mapping[str, int],
    end: float,
    workload_index: Mapping[str, int] | None = None,
) -> Runs:
    """Sweep the event log for every run of every workload (admission to its end);
    ``workload_index`` numbers the workloads (default: the records' order)."""
    amount_of: dict[str, float] = {}
    team_of: dict[str, int] = {}
    for name, rec in result.records.items():
        amount_of[name] = rec.workload.total_requests().get(resource, 0) / MILLI
        team_of[name] = team_index[rec.workload.team]

    def admitted(name: str, pods: Mapping[str, int] | None) -> float:
        """What a run takes: the workload's requests, or those of the pods a partial
        admission admitted (the admit event's ``pods``)."""
        if not pods:
            return amount_of[name]
        wl = result.records[name].workload
        per_pod = {ps.name: ps.requests.get(resource, 0) for ps in wl.podsets}
        return sum(per_pod.get(ps, 0) * n for ps, n in pods.items()) / MILLI

    if workload_index is None:
        workload_index = {name: i for i, name in enumerate(result.records)}
    number = workload_index  # an empty index (nothing submitted) numbers nobody
    open_runs: dict[str, tuple[float, float, float]] = {}
    team: list[int] = []
    workload: list[int] = []
    start: list[float] = []
    stop: list[float] = []
    amount: list[float] = []
    borrowed: list[float] = []
    preempted: list[bool] = []
    reason: list[str] = []

    def close(name: str, at: float, why: str | None) -> None:
        began, took, runs = open_runs.pop(name)
        team.append(team_of[name])
        workload.append(number.get(name, -1))
        start.append(began)
        stop.append(at)
        amount.append(runs)
        borrowed.append(took)
        preempted.append(why is not None)
        reason.append(category(why) if why is not None else "")

    for event in result.events:
        kind = event["event"]
        if kind == "admit":
            took = float(event.get("borrowed", {}).get(resource, 0.0))
            name = event["workload"]
            open_runs[name] = (float(event["at"]), took, admitted(name, event.get("pods")))
        elif kind in ("finish", "preempt") and event["workload"] in open_runs:
            why = str(event.get("reason", "")) if kind == "preempt" else None
            close(event["workload"], float(event["at"]), why)
    for name in list(open_runs):
        close(name, end, None)
    return Runs(
        team=np.asarray(team, dtype=np.int64),
        workload=np.asarray(workload, dtype=np.int64),
        start=np.asarray(start, dtype=np.float64),
        stop=np.asarray(stop, dtype=np.float64),
        amount=np.asarray(amount, dtype=np.float64),
        borrowed=np.asarray(borrowed, dtype=np.float64),
        preempted=np.asarray(preempted, dtype=np.bool_),
        reason=reason,
    )


@dataclass
class _NodeState:
    present: bool = True
    ready: bool = True
    healthy: bool = True
    cordoned: bool = False

    @property
    def up(self) -> bool:
        return self.present and self.ready and self.healthy and not self.cordoned


_ACTIONS: dict[str, dict[str, bool]] = {
    "join": {"present": True, "ready": True, "healthy": True, "cordoned": False},
    "add": {"present": True, "ready": True, "healthy": True, "cordoned": False},
    "cordon": {"cordoned": True},
    "uncordon": {"cordoned": False},
    "fail": {"ready": False},
    "gpu-unhealthy": {"healthy": False},
    "recover": {"ready": True, "healthy": True},
    "remove": {"present": False},
    "terminate": {"present": False},
}


@dataclass
class _Capacity:
    capacity: Step
    fixed_paid_t: list[float]
    fixed_paid_d: list[float]
    fixed_nodes_d: list[float]
    fixed_rate_d: list[float]
    unknown: list[str]


def _capacity(
    result: RunResult, resource: str, catalog: Catalog, stand_in: Mapping[str, str]
) -> _Capacity:
    """Schedulable capacity over time, and when unmanaged (fixed) nodes were present."""
    nodes: dict[str, Node] = {n.name: n for n in result.scenario.nodes}
    for node in result.nodes.values():
        nodes.setdefault(node.name, node)
    managed = set(result.autoscaler.nodes) if result.autoscaler is not None else set()
    if result.autoscaler is not None:
        for m in result.autoscaler.nodes.values():
            nodes.setdefault(m.name, m.node)

    def units(name: str) -> float:
        node = nodes.get(name)
        return 0.0 if node is None else node.allocatable.get(resource, 0) / MILLI

    states: dict[str, _NodeState] = {}
    t: list[float] = [0.0]
    d: list[float] = [0.0]
    paid_t: list[float] = []
    paid_d: list[float] = []
    count_d: list[float] = []
    rate_d: list[float] = []
    unknown: list[str] = []

    def present(name: str, at: float, sign: float) -> None:
        if name in managed:
            return
        node = nodes.get(name)
        if node is None:
            unknown.append(name)
            return
        paid_t.append(at)
        paid_d.append(sign * units(name))
        count_d.append(sign)
        rate_d.append(sign * node_price(node, catalog, stand_in)[1])

    for node in result.scenario.nodes:
        state = _NodeState(True, node.ready, node.healthy, node.unschedulable)
        states[node.name] = state
        if state.up:
            d[0] += units(node.name)
        present(node.name, 0.0, 1.0)
    for event in result.events:
        if event["event"] != "node":
            continue
        name = str(event["node"])
        change = _ACTIONS.get(str(event["action"]))
        if change is None:
            continue
        state = states.setdefault(name, _NodeState(present=False))
        was_up, was_present = state.up, state.present
        for key, value in change.items():
            setattr(state, key, value)
        at = float(event["at"])
        if state.up != was_up:
            t.append(at)
            d.append(units(name) if state.up else -units(name))
        if state.present != was_present:
            present(name, at, 1.0 if state.present else -1.0)
    capacity = step_from_deltas(np.asarray(t, dtype=np.float64), np.asarray(d, dtype=np.float64))
    return _Capacity(capacity, paid_t, paid_d, count_d, rate_d, sorted(set(unknown)))


def measure(
    result: RunResult,
    *,
    resource: str,
    catalog: Catalog,
    stand_in: Mapping[str, str],
    duration: float,
) -> Measured:
    """Reduce a run to arrays and step functions (see the module docstring)."""
    policy = result.scenario.policy
    team_names = [t.name for t in policy.teams]
    for rec in result.records.values():
        if rec.workload.team not in team_names:
            team_names.append(rec.workload.team)
    index = {name: i for i, name in enumerate(team_names)}
    n_teams = len(team_names)
    model = compile_policy(policy, catalog)
    quota = np.zeros(n_teams)
    for name, node in model.nodes.items():
        if name in index:
            quota[index[name]] = sum(v for (_, r), v in node.quota.items() if r == resource) / MILLI
    scaler = result.autoscaler
    end = max(result.end_time, duration)
    submitted = [name for name, rec in result.records.items() if rec.submitted]
    runs = extract_runs(result, resource, index, end, {n: i for i, n in enumerate(submitted)})

    # per-team usage: +amount at the start of a run, -amount at its end
    times = np.concatenate((runs.start, runs.stop))
    deltas = np.zeros((times.size, n_teams))
    rows = np.arange(runs.team.size)
    deltas[rows, runs.team] = runs.amount
    deltas[rows + runs.team.size, runs.team] = -runs.amount
    usage = step_from_deltas(times, deltas)

    cap = _capacity(result, resource, catalog, stand_in)
    paid_t = list(cap.fixed_paid_t)
    paid_d = list(cap.fixed_paid_d)
    count_d = list(cap.fixed_nodes_d)
    rate_d = list(cap.fixed_rate_d)
    launched = terminated = 0
    node_seconds = 0.0
    cloud_bill = 0.0
    if scaler is not None:
        for m in scaler.nodes.values():
            begin = m.instance.launched_at
            stop = m.terminated_at if m.terminated_at is not None else end
            amount = m.node.allocatable.get(resource, 0) / MILLI
            launched += 1
            terminated += m.terminated_at is not None
            node_seconds += max(0.0, stop - begin)
            paid_t += [begin, stop]
            paid_d += [amount, -amount]
            count_d += [1.0, -1.0]
            rate_d += [m.instance.price_per_hour, -m.instance.price_per_hour]
        cloud_bill = float(autoscaling_summary(result)["cost"]["total_usd"])
    pt = np.asarray(paid_t, dtype=np.float64)
    fixed_types: dict[str, tuple[int, float]] = {}
    for fixed in result.scenario.nodes:
        kind, price = node_price(fixed, catalog, stand_in)
        fixed_types[kind] = (fixed_types.get(kind, (0, price))[0] + 1, price)

    submit: list[float] = []
    first: list[float] = []
    wait_team: list[int] = []
    wait_priority: list[int] = []
    finish_team: list[int] = []
    completion: list[float] = []
    makespan = 0.0
    short = scaler.short_since if scaler is not None else {}
    short_since: list[float] = []
    requested: list[float] = []
    finished_at: list[float] = []
    for name in submitted:
        rec = result.records[name]
        wl = rec.workload
        finished_at.append(np.nan if rec.finished_at is None else rec.finished_at)
        short_since.append(short.get(name, np.nan))
        requested.append(wl.total_requests().get(resource, 0) / MILLI)
        submit.append(wl.submit_time)
        first.append(np.nan if rec.first_admitted_at is None else rec.first_admitted_at)
        wait_team.append(index[wl.team])
        wait_priority.append(wl.priority)
        if rec.finished_at is not None:
            finish_team.append(index[wl.team])
            completion.append(rec.finished_at - wl.submit_time)
            makespan = max(makespan, rec.finished_at)
    return Measured(
        resource=resource,
        team_names=team_names,
        quota=quota,
        runs=runs,
        usage=usage,
        capacity=cap.capacity,
        paid=step_from_deltas(pt, np.asarray(paid_d, dtype=np.float64)),
        nodes=step_from_deltas(pt, np.asarray(count_d, dtype=np.float64)),
        rate=step_from_deltas(pt, np.asarray(rate_d, dtype=np.float64)),
        fixed_rate=step_from_deltas(
            np.asarray(cap.fixed_paid_t, dtype=np.float64),
            np.asarray(cap.fixed_rate_d, dtype=np.float64),
        ),
        cloud_bill=cloud_bill,
        fixed_types=fixed_types,
        launched=launched,
        terminated=terminated,
        node_seconds=node_seconds,
        submit=np.asarray(submit, dtype=np.float64),
        first_admit=np.asarray(first, dtype=np.float64),
        wait_team=np.asarray(wait_team, dtype=np.int64),
        wait_priority=np.asarray(wait_priority, dtype=np.int64),
        finish_team=np.asarray(finish_team, dtype=np.int64),
        completion=np.asarray(completion, dtype=np.float64),
        window=duration,
        end=end,
        makespan=makespan or end,
        autoscaled=scaler is not None,
        unknown_nodes=cap.unknown,
        short_since=np.asarray(short_since, dtype=np.float64),
        amount=np.asarray(requested, dtype=np.float64),
        names=submitted,
        finish=np.asarray(finished_at, dtype=np.float64),
    )


def cost_until(m: Measured, horizon: float) -> float:
    """USD: fixed nodes at catalog prices until ``horizon`` plus the cloud's bill."""
    return float(m.fixed_rate.area(horizon)) / HOUR + m.cloud_bill


def cost_basis(m: Measured, horizon: float) -> str:
    """How :func:`cost_until` was computed, in words."""
    parts = []
    if m.fixed_types:
        each = ", ".join(f"{n} × {k} at ${p:.4f}/h" for k, (n, p) in sorted(m.fixed_types.items()))
        parts.append(f"fixed nodes {each} × {horizon / HOUR:.2f} h (catalog on-demand)")
    if m.autoscaled:
        parts.append(
            f"the simulated cloud's bill for {m.launched} instances "
            f"(${m.cloud_bill:,.2f}; per-second, 60 s minimum)"
        )
    return "; ".join(parts) or "no nodes"


def summarize(m: Measured) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Cluster and per-team numbers (see the module docstring)."""
    horizon = m.end
    runs = m.runs
    n_teams = len(m.team_names)
    used_runs = runs.used()
    used_team = np.bincount(runs.team, weights=used_runs, minlength=n_teams) / HOUR
    at_admission_team = (
        np.bincount(runs.team, weights=runs.borrowed * (runs.stop - runs.start), minlength=n_teams)
        / HOUR
    )
    lost_team = (
        np.bincount(runs.team, weights=np.where(runs.preempted, used_runs, 0.0), minlength=n_teams)
        / HOUR
    )
    used_window = float(runs.used(m.window).sum()) / HOUR
    lost_window = float(runs.used(m.window)[runs.preempted].sum()) / HOUR
    over = Step(m.usage.times, np.maximum(m.usage.values - m.quota[None, :], 0.0))
    borrowed_team = np.asarray(over.area(horizon)) / HOUR
    available = float(m.capacity.area(horizon)) / HOUR
    available_window = float(m.capacity.area(m.window)) / HOUR
    paid = float(m.paid.area(horizon)) / HOUR
    used = float(used_team.sum())
    first_waits, censored = m.waits(horizon)
    waits, _, requeues = m.queue_times(horizon)
    requeued = requeues > 0
    under = under_provision(m.short_since, m.first_admit, m.amount, horizon)
    lent_team = np.asarray(lent(m.usage, m.quota).area(horizon)) / HOUR
    in_quota_runs = runs.preempted & (runs.borrowed <= 0)
    lost_in_quota_team = (
        np.bincount(runs.team, weights=np.where(in_quota_runs, used_runs, 0.0), minlength=n_teams)
        / HOUR
    )
    in_quota = within_quota_at_submission(m.submit, m.finish, m.wait_team, m.amount, m.quota)
    paid_window = float(m.paid.area(m.window)) / HOUR
    cost = cost_until(m, horizon)
    cost_window = float(m.rate.area(m.window)) / HOUR

    def by_reason(mask: BoolArray | None = None) -> dict[str, int]:
        out: dict[str, int] = {}
        for i in np.flatnonzero(runs.preempted if mask is None else runs.preempted & mask):
            out[runs.reason[i]] = out.get(runs.reason[i], 0) + 1
        return dict(sorted(out.items()))

    teams: dict[str, dict[str, Any]] = {}
    for k, name in enumerate(m.team_names):
        mine = m.wait_team == k
        teams[name] = _rounded(
            {
                "quota": float(m.quota[k]),
                "workloads": int(mine.sum()),
                "finished": int((m.finish_team == k).sum()),
                "never_admitted": int((censored & mine).sum()),
                "used_hours": float(used_team[k]),
                "share_of_used": float(used_team[k] / used) if used else 0.0,
                "borrowed_hours": float(borrowed_team[k]),
                "borrowed_at_admission_hours": float(at_admission_team[k]),
                "lost_hours": float(lost_team[k]),
                "lent_hours": float(lent_team[k]),
                "in_quota_jobs": int((in_quota & mine).sum()),
                "in_quota_wait_seconds": with_max(first_waits[in_quota & mine]),
                "preemptions": int((runs.preempted & (runs.team == k)).sum()),
                "preemptions_in_quota": int((in_quota_runs & (runs.team == k)).sum()),
                "lost_hours_in_quota": float(lost_in_quota_team[k]),
                "preemptions_by_reason": by_reason(runs.team == k),
                "requeued": int((requeued & mine).sum()),
                "queue_wait_seconds": percentiles(waits[mine]),
                "first_wait_seconds": percentiles(first_waits[mine]),
                "completion_seconds": percentiles(m.completion[m.finish_team == k]),
            }
        )
    cluster = _rounded(
        {
            "resource": m.resource,
            "window_hours": m.window / HOUR,
            "makespan_hours": m.makespan / HOUR,
            "run_hours": horizon / HOUR,
            "capacity_peak": m.capacity.peak(),
            "used_hours": used,
            "used_hours_in_window": used_window,
            "spillover_hours": used - used_window,
            "available_hours_in_window": available_window,
            # no capacity in the window (an autoscaled run whose nodes came later): undefined
            "allocation": used_window / available_window if available_window else None,
            "useful_allocation": (
                (used_window - lost_window) / available_window if available_window else None
            ),
            "capacity_basis": "ready-autoscaled" if m.autoscaled else "fixed",
            "available_hours": available,
            "paid_hours": paid,
            "utilisation_of_paid": used / paid if paid else 0.0,
            "utilisation_of_paid_in_window": used_window / paid_window if paid_window else None,
            "borrowed_hours": float(borrowed_team.sum()),
            "borrowed_at_admission_hours": float(at_admission_team.sum()),
            "lost_hours": float(lost_team.sum()),
            "lost_hours_in_window": lost_window,
            "lent_hours": float(lent_team.sum()),
            "in_quota_jobs": int(in_quota.sum()),
            "in_quota_wait_seconds": with_max(first_waits[in_quota]),
            "preemptions": int(runs.preempted.sum()),
            "preemptions_in_quota": int(in_quota_runs.sum()),
            "lost_hours_in_quota": float(lost_in_quota_team.sum()),
            "preemptions_by_reason": by_reason(),
            "workloads": int(waits.size),
            "finished": int(m.completion.size),
            "never_admitted": int(censored.sum()),
            "requeued": int(requeued.sum()),
            "queue_wait_seconds": percentiles(waits),
            "first_wait_seconds": percentiles(first_waits),
            "completion_seconds": percentiles(m.completion),
            "cost_usd": cost,
            "cost_in_window_usd": cost_window,
            "cost_after_window_usd": cost - cost_window,
            "cost_basis": cost_basis(m, horizon),
            "fixed_nodes": sum(n for n, _ in m.fixed_types.values()),
            "nodes_launched": m.launched,
            "nodes_terminated": m.terminated,
            "node_hours": m.node_seconds / HOUR,
            "peak_nodes": int(m.nodes.peak()),
            "unknown_nodes": list(m.unknown_nodes),
            "under_provision_events": under.events if m.autoscaled else None,
            "under_provisioned_jobs": under.jobs if m.autoscaled else None,
            "under_provisioned_hours": under.hours if m.autoscaled else None,
            "under_provision_span_hours": under.span_hours if m.autoscaled else None,
        }
    )
    return cluster, teams
