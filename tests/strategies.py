"""Hypothesis strategies for the governance property tests.

A :class:`Case` is a small random cluster, policy and workload stream described as plain data.
It turns into engine inputs (nodes, a policy, workloads) or into a scenario document for the
runner, so that the same case can be checked one admission cycle at a time or over a whole run.

Two families:

- ``cases()``: anything goes — 1 or 2 flavors (``default``; two label-selected pools, whose
  pod sets may select a pool, so that a workload's pod sets may need different flavors; two
  instance types), quotas that may add up to more than the capacity, every sharing strategy,
  borrow limits of each kind, lending limits, fair share and idle sharing on or off, minimum
  runtimes, the starvation guard, disabled teams and workloads of teams without a policy.
- ``cases(friendly=True)``: the setting in which "work within quota is admitted after the
  needed preemptions" must hold: one flavor, all nodes schedulable, quotas adding up to at most
  the capacity, every pod asking for exactly 1 GPU and at most 1 cpu (nodes have 8 cpu and at
  most 4 GPUs, so only GPUs bind and fragmentation cannot interfere), reclaim allowed, no
  minimum runtime, no reclaim grace and no starvation guard.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import strategies as st

from fleetshare.governance.snapshot import Assignment, PodPlacement, Running, Snapshot
from fleetshare.model.node import Node
from fleetshare.model.workload import PodSet, Workload

GPU = "nvidia.com/gpu"
CPU = "cpu"
MEMORY = "memory"
MILLI = 1000
GI = 2**30
NODE_CPU = 8
NODE_MEMORY_GI = 32
GHOST_TEAM = "ghost"

FLAVOR_MODES: dict[str, tuple[str, ...]] = {
    "default": ("default",),
    "labels": ("pool-a", "pool-b"),
    "instance": ("ml.g5.8xlarge", "ml.g5.12xlarge"),
}
LABEL_KEY = "pool"


@dataclass(frozen=True)
class NodeDesc:
    name: str
    flavor: str
    gpus: int
    cordoned: bool = False

    def allocatable(self) -> dict[str, int]:
        return {
            CPU: NODE_CPU * MILLI,
            MEMORY: NODE_MEMORY_GI * GI * MILLI,
            GPU: self.gpus * MILLI,
        }


@dataclass(frozen=True)
class LimitDesc:
    """A borrow limit (kind absolute / percent_of_quota / percent_of_idle) or lending limit."""

    kind: str
    value: int
    resource: str = "*"


@dataclass(frozen=True)
class TeamDesc:
    name: str
    quota: dict[str, dict[str, int]]  # flavor -> resource -> whole units
    sharing: str = "LendAndBorrow"
    borrow_limits: tuple[LimitDesc, ...] = ()
    lending_limits: tuple[LimitDesc, ...] = ()
    weight: float = 1.0
    preempt_team_tasks: str = "LowerPriority"
    reclaim: str = "Any"
    enabled: bool = True
    strict_fifo: bool = False
    borrow_within: bool = False
    borrow_threshold: int | None = None
    stop: str = "None"
    group: str | None = None


@dataclass(frozen=True)
class PodSetDesc:
    count: int
    gpu: int
    cpu_milli: int
    pool: str | None = None
    """The flavor whose nodes it selects (``labels`` mode only), if any."""
    min_count: int | None = None
    """Partial admission: as few pods as this may run (``kueue`` cases only)."""

    def node_selector(self) -> dict[str, str]:
        return {} if self.pool is None else {LABEL_KEY: self.pool}

    def requests(self) -> dict[str, int]:
        out = {CPU: self.cpu_milli}
        if self.gpu:
            out[GPU] = self.gpu * MILLI
        return out

    def spec_requests(self) -> dict[str, Any]:
        out: dict[str, Any] = {CPU: f"{self.cpu_milli}m"}
        if self.gpu:
            out[GPU] = self.gpu
        return out


@dataclass(frozen=True)
class WorkloadDesc:
    name: str
    team: str
    priority_class: str | None
    submit_at: int
    duration: int | None
    podsets: tuple[PodSetDesc, ...]


@dataclass(frozen=True)
class EventDesc:
    at: int
    action: str
    node: str


@dataclass(frozen=True)
class Case:
    mode: str
    nodes: tuple[NodeDesc, ...]
    teams: tuple[TeamDesc, ...]
    priority_classes: tuple[tuple[str, int, bool], ...]  # (name, weight, default)
    fair_share: bool
    idle_sharing: bool
    min_runtime: int
    reclaim_grace: int
    starvation_guard: int | None
    workloads: tuple[WorkloadDesc, ...]
    events: tuple[EventDesc, ...] = ()
    friendly: bool = False
    groups: tuple[tuple[str, float], ...] = ()
    """Groups (name, fair-share weight) the teams may be in (``kueue`` cases)."""
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def flavors(self) -> tuple[str, ...]:
        return FLAVOR_MODES[self.mode]

    # -- the policy ------------------------------------------------------------------------

    def policy_dict(self) -> dict[str, Any]:
        cluster: dict[str, Any] = {
            "priority_classes": [
                {"name": n, "weight": w, "default": d} for n, w, d in self.priority_classes
            ],
            "fair_share": self.fair_share,
            "idle_resource_sharing": self.idle_sharing,
            "preemption": {
                "min_runtime_seconds": self.min_runtime,
                "reclaim_grace_seconds": self.reclaim_grace,
            },
            "starvation_guard_seconds": self.starvation_guard,
        }
        if self.mode == "labels":
            cluster["flavors"] = [{"name": f, "node_labels": {LABEL_KEY: f}} for f in self.flavors]
        teams = []
        for t in self.teams:
            quota = []
            for flavor, resources in t.quota.items():
                entry: dict[str, Any] = {"resources": dict(resources)}
                if self.mode != "default":
                    entry["flavor"] = flavor
                quota.append(entry)
            teams.append(
                {
                    "name": t.name,
                    "quota": quota,
                    "sharing": t.sharing,
                    "borrow_limits": [
                        {"resource": lim.resource, lim.kind: lim.value} for lim in t.borrow_limits
                    ],
                    "lending_limits": [
                        {"resource": lim.resource, "absolute": lim.value}
                        for lim in t.lending_limits
                    ],
                    "fair_share_weight": t.weight,
                    "preempt_team_tasks": t.preempt_team_tasks,
                    "reclaim": t.reclaim,
                    "enabled": t.enabled,
                    "queueing_strategy": "StrictFIFO" if t.strict_fifo else "BestEffortFIFO",
                    "borrow_within_cohort": {
                        "policy": "LowerPriority" if t.borrow_within else "Never",
                        "max_priority_threshold": t.borrow_threshold,
                    },
                    "stop_policy": t.stop,
                    "group": t.group,
                }
            )
        groups = [{"name": g, "fair_share_weight": w} for g, w in self.groups]
        return {"cluster": cluster, "groups": groups, "teams": teams}

    def priority_of(self, name: str | None) -> int:
        if name is None:
            return next((w for _, w, d in self.priority_classes if d), 0)
        return next(w for n, w, _ in self.priority_classes if n == name)

    # -- engine objects --------------------------------------------------------------------

    def node_objects(self) -> list[Node]:
        out = []
        for n in self.nodes:
            out.append(
                Node(
                    name=n.name,
                    allocatable=n.allocatable(),
                    instance_type=n.flavor if self.mode == "instance" else None,
                    labels={LABEL_KEY: n.flavor} if self.mode == "labels" else {},
                    unschedulable=n.cordoned,
                )
            )
        return out

    def workload_objects(self) -> list[Workload]:
        if "workloads" not in self._cache:
            self._cache["workloads"] = [
                Workload(
                    name=w.name,
                    team=w.team,
                    podsets=tuple(
                        PodSet(
                            f"ps{i}",
                            ps.count,
                            ps.requests(),
                            ps.node_selector(),
                            min_count=ps.min_count,
                        )
                        for i, ps in enumerate(w.podsets)
                    ),
                    submit_time=float(w.submit_at),
                    priority=self.priority_of(w.priority_class),
                    priority_class=w.priority_class,
                    duration=None if w.duration is None else float(w.duration),
                )
                for w in self.workloads
            ]
        return list(self._cache["workloads"])

    def flavor_by_node(self) -> dict[str, str]:
        return {n.name: n.flavor for n in self.nodes}

    # -- a scenario document -----------------------------------------------------------------

    def scenario_dict(self, workload_order: list[int] | None = None) -> dict[str, Any]:
        nodes = []
        for n in self.nodes:
            spec: dict[str, Any] = {
                "name": n.name,
                "allocatable": {CPU: NODE_CPU, MEMORY: f"{NODE_MEMORY_GI}Gi", GPU: n.gpus},
            }
            if self.mode == "instance":
                spec["instance_type"] = n.flavor
            if self.mode == "labels":
                spec["labels"] = {LABEL_KEY: n.flavor}
            nodes.append(spec)
        order = workload_order if workload_order is not None else range(len(self.workloads))
        workloads = []
        for i in order:
            w = self.workloads[i]
            spec = {
                "name": w.name,
                "team": w.team,
                "at": w.submit_at,
                "podsets": [
                    {
                        "name": f"ps{j}",
                        "count": ps.count,
                        "requests": ps.spec_requests(),
                        "node_selector": ps.node_selector(),
                    }
                    | ({"min_count": ps.min_count} if ps.min_count is not None else {})
                    for j, ps in enumerate(w.podsets)
                ],
            }
            if w.priority_class is not None:
                spec["priority"] = w.priority_class
            if w.duration is not None:
                spec["duration"] = w.duration
            workloads.append(spec)
        events = [{"at": e.at, "action": e.action, "nodes": [e.node]} for e in self.events]
        return {
            "name": "property-case",
            "cluster": {"nodes": nodes, "events": events},
            "policy": self.policy_dict(),
            "workloads": workloads,
        }


# -- strategies ----------------------------------------------------------------------------


def _fit_under(values: list[int], cap: int) -> list[int]:
    """Shrink the largest entries until the sum is at most ``cap``."""
    values = list(values)
    while sum(values) > cap:
        i = max(range(len(values)), key=lambda k: (values[k], -k))
        values[i] -= 1
    return values


def _borrow_limit() -> st.SearchStrategy[LimitDesc]:
    return st.one_of(
        st.builds(
            LimitDesc,
            st.just("absolute"),
            st.integers(0, 4),
            st.sampled_from(("*", GPU, CPU)),
        ),
        st.builds(
            LimitDesc,
            st.just("percent_of_quota"),
            st.sampled_from((50, 0, 25, 100, 200)),
            st.sampled_from(("*", GPU, CPU)),
        ),
        st.builds(
            LimitDesc,
            st.just("percent_of_idle"),
            st.sampled_from((50, 0, 25, 100)),
            st.sampled_from(("*", GPU)),
        ),
    )


def _lending_limit() -> st.SearchStrategy[LimitDesc]:
    return st.builds(LimitDesc, st.just("lending"), st.integers(0, 3), st.sampled_from((GPU, "*")))


# The strategies a case draws from, each built once: hypothesis validates a strategy object
# the first time it is drawn from, and one built anew at every draw (``st.builds``, ``|``,
# ``.map``) was validated again each time, most of the time a case took to generate. The
# same strategies, the same draws: the same cases.


def _tens(x: int) -> int:
    return x * 10


BORROW_LIMITS = st.lists(_borrow_limit(), max_size=2)
LENDING_LIMITS = st.lists(_lending_limit(), max_size=1)
THRESHOLDS = st.none() | st.integers(0, 100)
DURATIONS = st.none() | st.integers(3, 30).map(_tens)


@functools.cache
def _default_class(n_classes: int) -> st.SearchStrategy[int | None]:
    return st.none() | st.integers(0, n_classes - 1)


@functools.cache
def _priority_class(names: tuple[str, ...]) -> st.SearchStrategy[str | None]:
    return st.none() | st.sampled_from(list(names))


@functools.cache
def _node_events(nodes: tuple[str, ...]) -> st.SearchStrategy[list[EventDesc]]:
    return st.lists(
        st.builds(
            EventDesc,
            st.integers(0, 30).map(_tens),
            st.sampled_from(("cordon", "uncordon", "fail", "recover")),
            st.sampled_from(list(nodes)),
        ),
        max_size=3,
    )


@st.composite
def cases(
    draw: st.DrawFn,
    *,
    friendly: bool = False,
    max_workloads: int = 15,
    events: bool = False,
    min_workloads: int = 1,
    fair_share: bool | None = None,
    contended: bool = False,
    kueue: bool = False,
    mode: str | None = None,
) -> Case:
    """A random case; ``contended`` packs it: 2-3 small nodes, 2 teams, everything submitted
    within 20 s, so that teams compete for the same GPUs in the same cycles. ``kueue`` adds
    Kueue's queue settings: StrictFIFO, borrowWithinCohort (with a threshold or not), stop
    policies, pod sets that partial admission may shrink, teams in weighted groups; ``mode``
    fixes the flavor mode (``labels``: pod sets may select different flavors)."""
    if mode is None:
        mode = "default" if friendly else draw(st.sampled_from(("default", "labels", "instance")))
    flavors = FLAVOR_MODES[mode]
    n_nodes = draw(st.integers(2, 3)) if contended else draw(st.integers(2, 6))
    nodes = []
    for i in range(n_nodes):
        flavor = flavors[i] if i < len(flavors) else draw(st.sampled_from(flavors))
        gpus = draw(st.integers(1, 2)) if contended else draw(st.integers(1, 4))
        cordoned = False if friendly else draw(st.sampled_from((False, False, False, True)))
        nodes.append(NodeDesc(f"n{i}", flavor, gpus, cordoned))

    n_teams = 2 if contended else draw(st.integers(2, 4))
    names = [f"t{i}" for i in range(n_teams)]
    oversubscribed = False if friendly else draw(st.sampled_from((False, False, True)))
    with_cpu_quota = draw(st.booleans())
    quotas: dict[str, dict[str, dict[str, int]]] = {name: {} for name in names}
    for flavor in flavors:
        gpu_cap = sum(n.gpus for n in nodes if n.flavor == flavor)
        cpu_cap = NODE_CPU * sum(1 for n in nodes if n.flavor == flavor)
        gpu = [draw(st.integers(0, gpu_cap)) for _ in names]
        cpu = [draw(st.integers(0, cpu_cap)) for _ in names] if with_cpu_quota else []
        if not oversubscribed:
            gpu = _fit_under(gpu, gpu_cap)
            cpu = _fit_under(cpu, cpu_cap)
        for i, name in enumerate(names):
            quotas[name][flavor] = {GPU: gpu[i], **({CPU: cpu[i]} if with_cpu_quota else {})}

    teams = []
    for name in names:
        teams.append(
            TeamDesc(
                name=name,
                quota=quotas[name],
                sharing=draw(st.sampled_from(("LendAndBorrow",) * 4 + ("Lend", "DontLend"))),
                borrow_limits=tuple(draw(BORROW_LIMITS)),
                lending_limits=tuple(draw(LENDING_LIMITS)),
                weight=draw(st.sampled_from((1.0, 2.0, 0.5, 0.0))),
                preempt_team_tasks=draw(
                    st.sampled_from(("LowerPriority", "Never", "LowerOrNewerEqualPriority"))
                ),
                reclaim="Any"
                if friendly
                else draw(st.sampled_from(("Any", "LowerPriority", "Never"))),
                enabled=True if friendly else draw(st.sampled_from((True,) * 7 + (False,))),
            )
        )
    if kueue:
        for i, team in enumerate(teams):
            borrow = team.reclaim != "Never" and draw(st.booleans())
            teams[i] = replace(
                team,
                strict_fifo=draw(st.sampled_from((False, False, True))),
                borrow_within=borrow,
                borrow_threshold=draw(THRESHOLDS) if borrow else None,
                stop=draw(st.sampled_from(("None",) * 6 + ("Hold", "HoldAndDrain"))),
            )
    groups: tuple[tuple[str, float], ...] = ()
    if kueue and draw(st.booleans()):  # teams in groups of their own fair-share weights
        groups = (("g0", draw(st.sampled_from((1.0, 2.0, 0.5)))), ("g1", 1.0))
        for i, team in enumerate(teams):
            teams[i] = replace(team, group=draw(st.sampled_from(("g0", "g1", None))))

    n_classes = draw(st.integers(1, 3))
    weights = draw(
        st.lists(st.integers(0, 100), min_size=n_classes, max_size=n_classes, unique=True)
    )
    default = draw(_default_class(n_classes))
    classes = tuple((f"pc{i}", w, i == default) for i, w in enumerate(weights))

    team_choices = names if friendly else [*names * 6, GHOST_TEAM]
    n_workloads = draw(st.integers(min_workloads, max_workloads))
    workloads = []
    for i in range(n_workloads):
        podsets = []
        pods_left = 4
        for _ in range(draw(st.integers(1, 2))):
            if pods_left == 0:
                break
            count = draw(st.integers(1, pods_left))
            pods_left -= count
            least = None
            if kueue and count > 1 and draw(st.booleans()):  # partial admission
                least = draw(st.integers(1, count - 1))
            if friendly:
                podsets.append(PodSetDesc(count, 1, draw(st.sampled_from((500, 1000)))))
            else:
                podsets.append(
                    PodSetDesc(
                        count,
                        draw(st.sampled_from((1, 2, 0))),
                        draw(st.sampled_from((500, 1000, 2000, 4000))),
                        # pod sets of one workload that select different flavors
                        draw(st.sampled_from((None, None, *flavors))) if mode == "labels" else None,
                        least,
                    )
                )
        workloads.append(
            WorkloadDesc(
                name=f"w{i}",
                team=draw(st.sampled_from(team_choices)),
                priority_class=draw(_priority_class(tuple(c[0] for c in classes))),
                submit_at=draw(st.integers(0, 2 if contended else 12)) * 10,
                duration=draw(DURATIONS),
                podsets=tuple(podsets),
            )
        )

    event_list: tuple[EventDesc, ...] = ()
    if events and not friendly:
        event_list = tuple(draw(_node_events(tuple(n.name for n in nodes))))

    return Case(
        mode=mode,
        nodes=tuple(nodes),
        teams=tuple(teams),
        priority_classes=classes,
        fair_share=draw(st.booleans()) if fair_share is None else fair_share,
        idle_sharing=draw(st.booleans()),
        min_runtime=0 if friendly else draw(st.sampled_from((0, 0, 30, 120))),
        reclaim_grace=0 if friendly else draw(st.sampled_from((0, 0, 30))),
        starvation_guard=None if friendly else draw(st.sampled_from((None, None, 600, 60, 0))),
        workloads=tuple(workloads),
        events=event_list,
        friendly=friendly,
        groups=groups,
    )


def _first_fit(
    case: Case, free: dict[str, dict[str, int]], flavors: tuple[str, ...], wl: Workload
) -> tuple[PodPlacement, ...] | None:
    """Place every pod of pod set i on the first node of ``flavors[i]`` with room, or None."""
    trial = {name: dict(v) for name, v in free.items()}
    placement = []
    for ps, flavor in zip(wl.podsets, flavors, strict=True):
        counts: dict[str, int] = {}
        for _ in range(ps.count):
            for node in case.nodes:
                room = trial[node.name]
                if node.flavor == flavor and all(room[r] >= v for r, v in ps.requests.items()):
                    for r, v in ps.requests.items():
                        room[r] -= v
                    counts[node.name] = counts.get(node.name, 0) + 1
                    break
            else:
                return None
        placement.append(tuple(counts.items()))
    free.update(trial)
    return tuple(placement)


@st.composite
def snapshots(draw: st.DrawFn, case: Case) -> Snapshot:
    """A snapshot of ``case``: some workloads already running (placed first-fit), the rest
    pending. Running work may sit on cordoned nodes (cordoned after it started)."""
    workloads = case.workload_objects()
    now = max(w.submit_time for w in workloads) + draw(st.integers(0, 30)) * 10
    free = {n.name: n.allocatable() for n in case.nodes}
    running: list[Running] = []
    pending: list[Workload] = []
    for wl in workloads:
        if draw(st.booleans()):
            flavor = draw(st.sampled_from(case.flavors))
            # a pod set that selects a flavor runs there
            flavors = tuple(ps.node_selector.get(LABEL_KEY, flavor) for ps in wl.podsets)
            placement = _first_fit(case, free, flavors, wl)
            if placement is not None:
                admitted_at = draw(st.integers(int(wl.submit_time), int(now)))
                running.append(Running(wl, Assignment(flavors, placement), float(admitted_at)))
                continue
        pending.append(wl)
    return Snapshot(float(now), case.node_objects(), running, pending)


@st.composite
def cases_with_snapshots(draw: st.DrawFn, **kwargs: Any) -> tuple[Case, Snapshot]:
    case = draw(cases(**kwargs))
    return case, draw(snapshots(case))
