"""Prometheus metrics, named like Kueue's with the prefix ``fleetshare_``.

A team is Kueue's ClusterQueue (label ``cluster_queue``), its group the cohort (``cohort``),
a flavor the ResourceFlavor. Resource amounts are in base units (GPUs, CPU cores, bytes).
Definitions (docs/service.md has the table and the Kueue names they follow):

Gauges, read from the control loop's latest view at scrape time:

- ``fleetshare_pending_workloads{cluster_queue, status}`` and
  ``fleetshare_admitted_active_workloads{cluster_queue}``: see :mod:`fleetshare.control.metrics`
  (shared with the operator).
- ``fleetshare_pending_workloads_by_reason{cluster_queue, reason}``: the inadmissible ones by
  the category of their reason (:data:`fleetshare.model.reason.PendingCategory`, a fixed set:
  never read from a message); every team and category listed, 0 when none.
- ``fleetshare_cluster_queue_resource_usage{cohort, cluster_queue, flavor, resource}``: the
  requests of the team's admitted workloads, per governed (flavor, resource).
- ``fleetshare_cluster_queue_nominal_quota{...}``: the team's guaranteed quota.
- ``fleetshare_cluster_queue_borrowed_resources{...}``: usage beyond quota, max(0, usage -
  quota) (fleetshare's own; Kueue exposes no borrowed amount).
- ``fleetshare_cluster_queue_borrowing_limit{...}`` and ``..._lending_limit{...}``: the
  team's absolute limits, where set (Kueue's gauges of the same names).
- ``fleetshare_cluster_queue_fair_share_weight{cluster_queue}`` and
  ``fleetshare_cluster_queue_weighted_share{cluster_queue}``: the team's weight, and max over
  governed resources of usage above quota / all quota lendable in the cluster, ÷ weight
  (Kueue's ``kueue_cluster_queue_weighted_share``; the number fair share decides by).
- ``fleetshare_nodes{instance_type, capacity_type, zone, source}``: nodes in the cluster.
- ``fleetshare_nodes_hourly_cost_dollars{instance_type, capacity_type, source}``: the sum of
  those nodes' prices (on-demand catalog price for config nodes, the launch price for nodes
  the autoscaler launched; nodes without a price count 0).
- ``fleetshare_loop_up``: 1 while the control loop runs, 0 after it failed or while it has not
  gone round (or, as a process of its own, reported) within ``serve --stale-seconds``.
- ``fleetshare_leader``: 1 on the replica that runs the loop: ``fleetshare_lease_held`` while
  the loop is up.
- ``fleetshare_lease_held``: 1 while this replica holds the loop's lease
  (:attr:`ControlPlane.lease_held`: in two-process ``serve`` its loop process's, as last
  reported, 0 while those reports are stale).
- ``fleetshare_lease_holder_info{holder}``: 1, labelled with the replica the lease row names,
  read from the store at scrape time.

Counters and histograms, updated by the loop as it acts:

- ``fleetshare_admitted_workloads_total{cluster_queue}``: admissions.
- ``fleetshare_admission_wait_time_seconds{cluster_queue}``: histogram of the time from
  submission, or from the latest preemption, to admission.
- ``fleetshare_preempted_workloads_total{preempting_cluster_queue, reason}``: preemptions by
  the preemptor's team and Kueue's reason (``InCohortReclamation`` for reclaim,
  ``InClusterQueue`` for priority within a team, ``InCohortFairSharing`` for fair share).
- ``fleetshare_evicted_workloads_total{cluster_queue, reason}``: every eviction of an admitted
  workload, ``Preempted`` for preemptions, else the cause (``node-removed``, ``node-failure``,
  a disruption method).
- ``fleetshare_loop_reconcile_duration_seconds``: histogram of one reconcile (admission
  cycles and the autoscaler step) of the control loop.
- ``fleetshare_lease_transitions_total{to}``: see :mod:`fleetshare.service.lease`.
- ``fleetshare_store_operation_duration_seconds{operation}`` and
  ``fleetshare_store_errors_total{operation, error}``: see
  :mod:`fleetshare.service.store_metrics` (the API process's own operations too; the two
  processes' samples are summed, :mod:`fleetshare.service.merged_metrics`).

A loop process's counters and histograms carry over to its successor when it is started again
(:mod:`fleetshare.service.merged_metrics`): they count from the start of the API process.

The process serving the API also exposes:

- ``fleetshare_http_request_duration_seconds{method, route, code}``: see
  :mod:`fleetshare.service.http_metrics` (errors are its count by ``code``).
- ``process_*`` (CPU seconds, resident memory, open file descriptors, start time) and
  ``python_info``: prometheus-client's standard process and platform collectors.
- ``fleetshare_build_info{version, python}``: 1.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError

from fleetshare.control.metrics import workload_gauges
from fleetshare.governance.snapshot import Snapshot
from fleetshare.governance.state import CycleState
from fleetshare.model.quantity import to_number
from fleetshare.model.reason import PENDING_CATEGORIES
from fleetshare.model.workload import Workload
from fleetshare.scenario.report import team_usage
from fleetshare.service.http_metrics import request_histogram
from fleetshare.service.merged_metrics import merge, render

if TYPE_CHECKING:
    from fleetshare.service.plane import ControlPlane, View

PREEMPTION_REASON = {
    "reclaim": "InCohortReclamation",
    "priority": "InClusterQueue",
    "fair-share": "InCohortFairSharing",
}
"""fleetshare's preemption reasons as Kueue names them."""

WAIT_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
LOOP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class LoopMetrics:
    """The counters and histograms the loop updates as it acts, on a registry of their own
    (in the process that runs the loop)."""

    def __init__(self, plane: ControlPlane, registry: CollectorRegistry | None = None) -> None:
        # Kueue's metrics have no *_created series either
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.admitted = Counter(
            "fleetshare_admitted_workloads", "Admissions.", ["cluster_queue"], registry=r
        )
        self.wait = Histogram(
            "fleetshare_admission_wait_time_seconds",
            "Time from submission (or the latest preemption) to admission.",
            ["cluster_queue"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.preempted = Counter(
            "fleetshare_preempted_workloads",
            "Preemptions by the preemptor's team and reason.",
            ["preempting_cluster_queue", "reason"],
            registry=r,
        )
        self.evicted = Counter(
            "fleetshare_evicted_workloads",
            "Evictions of admitted workloads by cause.",
            ["cluster_queue", "reason"],
            registry=r,
        )
        self.loop = Histogram(
            "fleetshare_loop_reconcile_duration_seconds",
            "Duration of one reconcile of the control loop.",
            buckets=LOOP_BUCKETS,
            registry=r,
        )
        plane.backend.on_admit = self._admitted
        plane.backend.on_preempt = self._evicted
        plane.on_step = self.loop.observe
        plane.store.metrics.register(r)
        r.register(plane.lease.transitions)

    def _admitted(self, workload: Workload, waited: float) -> None:
        self.admitted.labels(workload.team).inc()
        self.wait.labels(workload.team).observe(max(0.0, waited))

    def _evicted(self, team: str, by_team: str | None, reason: str) -> None:
        kueue = PREEMPTION_REASON.get(reason)
        if kueue is not None:
            self.preempted.labels(by_team or "", kueue).inc()
        self.evicted.labels(team, "Preempted" if kueue else reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class ServiceMetrics:
    """The service's metrics: the gauges from ``plane``'s view, and the loop's counters and
    histograms (with its store's and lease's), this process's or (``loop_metrics``) the loop
    process's, merged with this process's own (:mod:`fleetshare.service.merged_metrics`)."""

    def __init__(
        self, plane: ControlPlane, loop_metrics: Callable[[], list[Metric]] | None = None
    ) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry()
        self.registry.register(_ViewCollector(plane))
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        build_info(self.registry)
        self.http = request_histogram(self.registry)
        """Request latency by route (:mod:`fleetshare.service.http_metrics` times requests)."""
        self._loop = loop_metrics
        if loop_metrics is None:
            LoopMetrics(plane, self.registry)
        else:  # this process's own store operations (the API's); the loop's come with its own
            plane.store.metrics.register(self.registry)

    def render(self) -> bytes:
        if self._loop is None:
            return generate_latest(self.registry)
        return render(merge(self.registry.collect(), self._loop()))


def build_info(registry: CollectorRegistry) -> None:
    """``fleetshare_build_info{version, python}`` 1: what is running (Prometheus' convention
    for build information)."""
    import platform

    from fleetshare import __version__

    info = Info("fleetshare_build", "The fleetshare version running.", registry=registry)
    info.info({"version": __version__, "python": platform.python_version()})


class _ViewCollector(Collector):
    """Gauges computed from the loop's latest view at scrape time."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def describe(self) -> list[Metric]:
        return []  # computed at collect time; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        plane = self.plane
        view = plane.current_view()
        yield from _workload_gauges(view)
        yield from _quota_gauges(view)
        yield from _node_gauges(view)
        up = GaugeMetricFamily("fleetshare_loop_up", "1 while the control loop runs.")
        unhealthy = bool(plane.failed or plane.stalled)
        up.add_metric([], 0.0 if unhealthy else 1.0)
        yield up
        leader = GaugeMetricFamily(
            "fleetshare_leader", "1 on the replica that holds the lease and runs the loop."
        )
        leader.add_metric([], 1.0 if plane.leader and not unhealthy else 0.0)
        yield leader
        yield from _lease_gauges(plane)


def _lease_gauges(plane: ControlPlane) -> Iterator[Metric]:
    """Whether this replica holds the loop's lease, and who holds it as the store says."""
    held = GaugeMetricFamily(
        "fleetshare_lease_held",
        "1 while this replica holds the control loop's lease (in its loop process).",
    )
    held.add_metric([], 1.0 if plane.lease_held else 0.0)
    yield held
    holder = InfoMetricFamily(
        "fleetshare_lease_holder",
        "The replica the lease row names (host/boot id/PID namespace/PID/nonce).",
        labels=["holder"],
    )
    try:
        current = plane.lease.current()
    except SQLAlchemyError:  # the store is away: counted in fleetshare_store_errors_total
        current = None
    if current is not None:
        holder.add_metric([current[0]], {})
    yield holder


def _workload_gauges(view: View) -> Iterator[Metric]:
    teams = [t.name for t in view.engine.policy.teams]
    yield from workload_gauges(
        teams,
        ((w.team, name in view.waiting) for name, w in view.pending.items()),
        (entry.workload.team for entry in view.running.values()),
    )
    yield _reason_gauge(teams, view)


def _reason_gauge(teams: list[str], view: View) -> Metric:
    """Inadmissible pending workloads by team and the category of their reason (every team
    and category listed, 0 when none): summed over ``reason``, a team's
    ``fleetshare_pending_workloads{status="inadmissible"}``."""
    family = GaugeMetricFamily(
        "fleetshare_pending_workloads_by_reason",
        "Pending workloads a cycle considered and left waiting, by the category of their reason.",
        labels=["cluster_queue", "reason"],
    )
    counts = Tally(
        (workload.team, view.waiting[name].reason.category)
        for name, workload in view.pending.items()
        if name in view.waiting
    )
    for team in sorted(set(teams) | {team for team, _ in counts}):
        for category in PENDING_CATEGORIES:
            family.add_metric([team, category], counts.get((team, category), 0))
    return family


def _quota_gauges(view: View) -> Iterator[Metric]:
    labels = ["cohort", "cluster_queue", "flavor", "resource"]
    families = {
        "used": GaugeMetricFamily(
            "fleetshare_cluster_queue_resource_usage",
            "Requests of the team's admitted workloads (base units).",
            labels=labels,
        ),
        "quota": GaugeMetricFamily(
            "fleetshare_cluster_queue_nominal_quota",
            "The team's guaranteed quota (base units).",
            labels=labels,
        ),
        "borrowed": GaugeMetricFamily(
            "fleetshare_cluster_queue_borrowed_resources",
            "Usage beyond the team's quota (base units).",
            labels=labels,
        ),
    }
    borrowing = GaugeMetricFamily(
        "fleetshare_cluster_queue_borrowing_limit",
        "The team's absolute borrowing limit, where one is set (base units).",
        labels=labels,
    )
    lending = GaugeMetricFamily(
        "fleetshare_cluster_queue_lending_limit",
        "How much of the team's quota it may lend, where a limit is set (base units).",
        labels=labels,
    )
    engine = view.engine
    model = engine.model
    summary = team_usage(engine, view.nodes, list(view.running.values()), view.now)
    governed = sorted(model.governed)
    for team in engine.policy.teams:
        by_flavor = summary.get(team.name, {}).get("by_flavor", {})
        node = model.nodes.get(team.name)
        for flavor, resource in governed:
            values = by_flavor.get(flavor, {})
            key = [team.group or "", team.name, flavor, resource]
            for kind, family in families.items():
                amount = values.get(kind, {}).get(resource, 0)
                family.add_metric(key, amount)
            if node is None:
                continue
            limit = node.borrowing_limit.get((flavor, resource))
            if limit is not None:
                borrowing.add_metric(key, to_number(limit.amount))
            lend = node.lending_limit.get((flavor, resource))
            if lend is not None:
                lending.add_metric(key, to_number(lend))
    yield from families.values()
    yield borrowing
    yield lending
    yield from _share_gauges(view)


def _share_gauges(view: View) -> Iterator[Metric]:
    """Kueue's fair-sharing gauges: each team's weight and weighted share (the engine's
    :meth:`CycleState.dominant_share`, the number fair share orders and preempts by)."""
    weight = GaugeMetricFamily(
        "fleetshare_cluster_queue_fair_share_weight",
        "The team's fair-share weight.",
        labels=["cluster_queue"],
    )
    share = GaugeMetricFamily(
        "fleetshare_cluster_queue_weighted_share",
        "Max over governed resources of (usage above quota) / (all quota lendable in the "
        "cluster), divided by the team's weight.",
        labels=["cluster_queue"],
    )
    engine = view.engine
    snapshot = Snapshot(view.now, list(view.nodes), list(view.running.values()), [])
    state = CycleState(engine.model, engine.policy.cluster, snapshot)
    for team in engine.policy.teams:
        weight.add_metric([team.name], team.fair_share_weight)
        if team.name in engine.model.teams:
            share.add_metric([team.name], state.dominant_share(team.name))
    yield weight
    yield share


def _node_gauges(view: View) -> Iterator[Metric]:
    count = GaugeMetricFamily(
        "fleetshare_nodes",
        "Nodes in the cluster.",
        labels=["instance_type", "capacity_type", "zone", "source"],
    )
    cost = GaugeMetricFamily(
        "fleetshare_nodes_hourly_cost_dollars",
        "Sum of the nodes' prices per hour (USD).",
        labels=["instance_type", "capacity_type", "source"],
    )
    counts: dict[tuple[str, str, str, str], int] = {}
    costs: dict[tuple[str, str, str], float] = {}
    for node in view.nodes:
        info = view.node_info.get(node.name)
        source = info.source if info else "config"
        itype = node.instance_type or ""
        key = (itype, node.capacity_type, node.zone or "", source)
        counts[key] = counts.get(key, 0) + 1
        price = info.price_per_hour if info and info.price_per_hour else 0.0
        ckey = (itype, node.capacity_type, source)
        costs[ckey] = costs.get(ckey, 0.0) + price
    for key, n in sorted(counts.items()):
        count.add_metric(list(key), n)
    for ckey, usd in sorted(costs.items()):
        cost.add_metric(list(ckey), round(usd, 6))
    yield count
    yield cost
