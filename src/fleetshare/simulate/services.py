"""Services in a simulated run: their replicas and placeholders as workloads, the scaler
ticking on the virtual clock, and each replica's way from wanted to serving.

A replica is an ordinary single-pod workload of the service's team and priority class, so
governance admits, places and preempts it like any pod (an inference class above training
preempts training within the team; placeholders, of the lowest class, are preempted by any
replica). Its way to serving: wanted (the scaler asks for it: submitted) -> admitted on a node
(at once where there is room, else when the autoscaler's node joins: the node launch) ->
image pulled (skipped where the node already ran a pod of the service's image, replica or
placeholder, or is of a pool in ``startup.preloaded_pools``) -> model loaded -> serving,
until deleted (scale-down) or evicted.
Scale-down deletes replicas as a ReplicaSet does: not yet placed first, then not yet
serving, then serving, newest first in each.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from fleetshare.control.changes import Admitted, Change, NodeLeft, Preempted
from fleetshare.control.state import SUBMIT
from fleetshare.governance.snapshot import Assignment
from fleetshare.inference.forecast import (
    Forecaster,
    SeasonalForecaster,
    TrendForecaster,
    TrendSettings,
)
from fleetshare.inference.gauges import RUNNING, WAITING, Scrape, avg_over_time, scrape_times
from fleetshare.inference.scaler import ScalerState, decide
from fleetshare.inference.service import ROLE_LABEL, SERVICE_LABEL, Service, readings
from fleetshare.inference.serving import Server
from fleetshare.inference.spec import ForecastSpec
from fleetshare.inference.startup import node_ready
from fleetshare.model.workload import Workload
from fleetshare.scenario.loader import Scenario
from fleetshare.scenario.runner import Runner, RunResult, WorkloadRecord

KIND_LABEL = "fleetshare.io/kind"
PREEMPTIBLE_LABEL = "fleetshare.io/preemptible"


@dataclass
class Pod:
    """One replica or headroom workload (a placeholder, or a training gang) and its way to
    serving."""

    name: str
    wanted_at: float
    placeholder: bool
    node: str | None = None
    admitted_at: float | None = None
    ready_at: float | None = None
    """When it serves (None while not placed)."""
    deleted_at: float | None = None
    serving: list[tuple[float, float]] = field(default_factory=list)
    """Closed intervals it served."""
    held: list[tuple[float, float]] = field(default_factory=list)
    """Closed intervals it held a node (placed)."""
    starts: list[tuple[float, float, float]] = field(default_factory=list)
    """(wanted or requeued, placed, serving) of each time it came to serve."""
    since: float = 0.0
    """When it was last wanted (created, or evicted and queued again)."""
    nodes: tuple[str, ...] = ()
    """The nodes it is placed on (a training gang's every node)."""

    def stop(self, now: float) -> None:
        """It leaves its node at ``now`` (deleted, evicted, or the run ends)."""
        if self.admitted_at is not None:
            self.held.append((self.admitted_at, now))
        if self.ready_at is not None and self.ready_at <= now:
            self.serving.append((self.ready_at, now))

    def waited(self, end: float) -> list[tuple[float, float]]:
        """The intervals it waited to be placed (from wanted, and after each stop it did not
        ask for: evicted), up to its deletion or ``end``."""
        out, since = [], self.wanted_at
        for a, b in self.held:
            if a > since:
                out.append((since, a))
            since = b
        until = min(end, self.deleted_at if self.deleted_at is not None else end)
        if since < until:
            out.append((since, until))
        return out

    def stage(self, now: float) -> int:
        """0 not placed, 1 placed and starting, 2 serving."""
        if self.admitted_at is None:
            return 0
        return 2 if self.ready_at is not None and self.ready_at <= now else 1


@dataclass
class ServiceState:
    """One service during a run."""

    service: Service
    forecaster: Forecaster | None
    lead: float
    scaler: ScalerState = field(default_factory=ScalerState)
    pods: dict[str, Pod] = field(default_factory=dict)
    serial: int = 0
    queue: float = 0.0
    """The fluid queue (services without a serving model): requests beyond capacity."""
    server: Server | None = None
    """The serving model run as the simulation goes, when a trigger reads its gauges."""
    scrapes: list[Scrape] = field(default_factory=list)
    scraped_to: float = -1.0
    last_tick: float | None = None
    history: list[tuple[float, float]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)

    def live(self, placeholder: bool) -> list[Pod]:
        return [
            p for p in self.pods.values() if p.deleted_at is None and p.placeholder == placeholder
        ]

    def serving(self, now: float) -> int:
        return sum(1 for p in self.live(False) if p.stage(now) == 2)


@dataclass(frozen=True)
class _Tick:
    index: int


def lead_seconds(service: Service, launch_latency: float) -> float:
    """How far ahead a forecast looks: its own ``lead_seconds``, else the time a replica
    takes when it needs a node (launch + image pull + model load) plus one polling interval."""
    f = service.forecast
    if f is not None and f.lead_seconds is not None:
        return f.lead_seconds
    s = service.startup
    return (
        launch_latency
        + s.image_pull_seconds
        + s.model_load_seconds
        + service.scaler.polling_interval_seconds
    )


def _forecaster(spec: ForecastSpec) -> Forecaster:
    """The forecaster a service's ``forecast`` settings name."""
    if spec.model == "holt-winters":
        return SeasonalForecaster(refit_every_samples=spec.refit_every_samples)
    return TrendForecaster(
        TrendSettings(
            window=spec.window_seconds,
            min_rise=spec.min_rise,
            z=spec.z,
            z_off=spec.z_off,
            baseline=spec.baseline_seconds,
            min_noise=spec.min_noise,
            max_factor=spec.max_factor,
            hold=spec.hold_seconds,
        )
    )


class ServiceRunner(Runner):
    """The scenario runner with services: replicas follow each service's scaler."""

    def __init__(self, scenario: Scenario, services: list[Service]) -> None:
        super().__init__(scenario)
        latency = launch_latency(scenario)
        self.services: list[ServiceState] = []
        for service in services:
            f = service.forecast
            server = None
            if service.reads_engine():
                assert service.requests is not None and service.serving is not None
                server = Server(service.requests, service.serving, count_running=True)
            self.services.append(
                ServiceState(
                    service,
                    _forecaster(f) if f is not None else None,
                    lead_seconds(service, latency),
                    server=server,
                )
            )
        self._owner: dict[str, tuple[ServiceState, Pod]] = {}
        self._images: dict[str, dict[str, float]] = {}
        """Per node, when each service's image is (or will be) pulled there."""
        self._released: dict[str, float] = {}
        """Per node, when a stopped training job saving its state releases its GPUs."""
        self.clock_start = scenario.spec.autoscaler.clock_start
        for i in range(len(self.services)):
            self.push(0.0, SUBMIT, _Tick(i))
        self.end = max((s.traffic.end for s in services), default=0.0)

    # -- the scaler's tick -----------------------------------------------------------------

    def _apply(self, now: float, kind: int, payload: Any) -> None:
        if isinstance(payload, _Tick):
            self._tick(now, self.services[payload.index], payload)
            return
        super()._apply(now, kind, payload)

    def _tick(self, now: float, state: ServiceState, tick: _Tick) -> None:
        service = state.service
        rate = service.traffic.at(now)
        serving = state.serving(now)
        if state.last_tick is not None:
            # requests beyond the serving capacity wait (fed at the last tick's rates)
            dt = now - state.last_tick
            last = state.decisions[-1]
            excess = last["rps"] - last["serving"] * service.capacity_rps
            state.queue = max(0.0, state.queue + excess * dt)
        state.last_tick = now
        state.history.append((now, service.seen_rate(now)))
        state.history = [h for h in state.history if h[0] > now - 86_400.0]
        measured = {WAITING: state.queue} if state.server is None else _gauges(now, state)
        got = readings(
            service, now, measured, self.clock_start, state.forecaster, state.history, state.lead
        )
        decision = decide(service.scaler, state.scaler, now, got)
        state.scaler = decision.state
        before = len(state.live(False))
        self._scale(now, state, decision.replicas, placeholder=False)
        self._scale(now, state, service.headroom_workloads(decision.replicas), placeholder=True)
        state.decisions.append(
            {"at": now, "rps": rate, "replicas": decision.replicas, "serving": serving}
        )
        if decision.replicas != before:
            self._progress = True
            self._log(
                now,
                "scale",
                service=service.name,
                replicas=decision.replicas,
                before=before,
                why=decision.why,
            )
        following = now + service.scaler.polling_interval_seconds
        if following < service.traffic.end and (
            self.scenario.until is None or following <= self.scenario.until
        ):
            self.push(following, SUBMIT, tick)

    def _scale(self, now: float, state: ServiceState, wanted: int, *, placeholder: bool) -> None:
        live = state.live(placeholder)
        for _ in range(wanted - len(live)):
            self._create(now, state, placeholder)
        if wanted < len(live):
            order = sorted(live, key=lambda p: (p.stage(now), -p.wanted_at, -_serial(p.name)))
            for pod in order[: len(live) - wanted]:
                self._delete(now, state, pod)

    def _create(self, now: float, state: ServiceState, placeholder: bool) -> None:
        service = state.service
        state.serial += 1
        role = "placeholder" if placeholder else "replica"
        name = f"{service.name}-{'ph' if placeholder else 'r'}{state.serial}"
        labels = {SERVICE_LABEL: service.name, ROLE_LABEL: role}
        if placeholder:
            labels[PREEMPTIBLE_LABEL] = "true"
            labels[KIND_LABEL] = "batch"
        else:
            labels[KIND_LABEL] = "inference"
        wl = Workload(
            name=name,
            team=service.headroom_team() if placeholder else service.team,
            podsets=(
                replace(service.pod, count=service.headroom_gang()) if placeholder else service.pod,
            ),
            submit_time=now,
            priority=service.placeholder_priority if placeholder else service.priority,
            priority_class=(
                service.headroom.priority
                if placeholder and service.headroom
                else service.priority_class
            ),
            labels=labels,
        )
        pod = Pod(name, now, placeholder, since=now)
        state.pods[name] = pod
        self._owner[name] = (state, pod)
        self.records[name] = WorkloadRecord(wl, submitted=True)
        self.pending.put(wl)
        self.loop.world_changed()
        self._log(now, "submit", workload=name, team=wl.team, pods=1)

    def _release(self, now: float, state: ServiceState, pod: Pod) -> None:
        """A training job stopped at ``now`` (reclaimed or deleted) saves its state on SIGTERM
        before its GPUs are free (with ``headroom.termination_grace_seconds``)."""
        headroom = state.service.headroom
        if pod.placeholder and pod.admitted_at is not None and headroom is not None:
            release = headroom.release_seconds()
            for node in pod.nodes if release > 0 else ():
                self._released[node] = max(self._released.get(node, now), now + release)

    def _delete(self, now: float, state: ServiceState, pod: Pod) -> None:
        self._release(now, state, pod)
        pod.deleted_at = now
        pod.stop(now)
        record = self.records[pod.name]
        self.cancel(pod.name)
        record.state, record.finished_at = "deleted", now
        self.loop.world_changed()
        self._log(now, "delete", workload=pod.name)

    # -- what the loop does to replicas ------------------------------------------------------

    def _record(self, change: Change) -> None:
        super()._record(change)
        if isinstance(change, Admitted):
            self._placed(change.at, change.workload.name, change.assignment)
        elif isinstance(change, Preempted):
            self._evicted(change.at, change.workload)
        elif isinstance(change, NodeLeft):  # its images go with it
            self._images.pop(change.node, None)
            self._released.pop(change.node, None)

    def _placed(self, now: float, name: str, assignment: Assignment) -> None:
        """A replica or placeholder was admitted: it starts on its node."""
        owned = self._owner.get(name)
        if owned is None:
            return
        state, pod = owned
        node = assignment.placement[0][0][0]
        pod.nodes = tuple(sorted(assignment.nodes))
        headroom = state.service.headroom
        if pod.placeholder and headroom is not None and headroom.held_by == "training":
            # training holding the headroom: it runs its own image, not the service's
            pod.node, pod.admitted_at, pod.ready_at = node, now, now
            return
        # a stopped training job saving its state holds the GPUs until it is done
        begin = max(now, self._released.get(node, now))
        images = self._images.setdefault(node, {})
        startup = state.service.startup
        pull = 0.0 if self._preloaded(node, startup.preloaded_pools) else startup.image_pull_seconds
        pulled = images.setdefault(state.service.name, begin + pull)
        pod.node, pod.admitted_at = node, now
        pod.ready_at = max(begin, pulled) + startup.model_load_seconds
        if not pod.placeholder:
            pod.starts.append((pod.since, now, pod.ready_at))

    def _preloaded(self, node: str, pools: list[str]) -> bool:
        """True when ``node`` is an autoscaler's node of one of ``pools`` (it booted with the
        service's image preloaded)."""
        managed = self.autoscaler.nodes.get(node) if self.autoscaler is not None else None
        return managed is not None and managed.pool in pools

    def _evicted(self, now: float, name: str) -> None:
        """A replica or placeholder was evicted: it waits to be placed again."""
        owned = self._owner.get(name)
        if owned is None:
            return
        state, pod = owned
        self._release(now, state, pod)
        if (pod.ready_at is None or pod.ready_at > now) and pod.starts and not pod.placeholder:
            pod.starts.pop()  # it never came to serve that time
        pod.stop(now)
        pod.node = pod.admitted_at = pod.ready_at = None
        pod.since = now

    def busy(self, now: float) -> bool:
        return now < self.end or super().busy(now)

    def finish(self, end: float) -> None:
        """Close the intervals of pods still serving at ``end``."""
        for state in self.services:
            for pod in state.pods.values():
                if pod.deleted_at is None:
                    pod.stop(end)


def _gauges(now: float, state: ServiceState) -> dict[str, float]:
    """The serving engine's gauges as the scaler reads them at ``now``: the serving model is
    told the replicas as they are now and run up to each scrape since the last tick
    (inference/gauges.py); without ``observed_rate``, their true values now."""
    server = state.server
    assert server is not None
    replicas = state.live(False)
    server.know(
        [iv for p in state.pods.values() if not p.placeholder for iv in p.serving],
        [p.ready_at for p in replicas if p.ready_at is not None],
        now,
    )
    o = state.service.observed
    if o is None:
        server.advance(now)
        return {WAITING: server.waiting(now), RUNNING: server.running(now)}
    for at in scrape_times(state.scraped_to, now, o.scrape_interval_seconds):
        server.advance(at)
        state.scrapes.append(Scrape(at, server.waiting(at), server.running(at)))
    state.scraped_to = now
    state.scrapes = [s for s in state.scrapes if s.at > now - o.window_seconds]
    return avg_over_time(state.scrapes, now, o.window_seconds)


def _serial(name: str) -> int:
    digits = name[len(name.rstrip("0123456789")) :]
    return int(digits) if digits else 0


@dataclass
class ServiceRun:
    """A run with services: the scenario's result and each service's pods."""

    result: RunResult
    services: list[ServiceState]
    end: float
    option: str


def launch_latency(scenario: Scenario) -> float:
    """The longest a node of the scenario's pools takes to launch (a forecast's lead)."""
    cloud = scenario.spec.cloud
    pools = scenario.spec.node_pools
    by_type = [
        cloud.launch_latency_by_type[i.name]
        for i in scenario.catalog
        if i.name in cloud.launch_latency_by_type and any(p.allows(i) for p in pools)
    ]
    return max(by_type, default=cloud.launch_latency_seconds)


def with_node_ready_table(scenario: Scenario) -> Scenario:
    """``scenario`` whose cloud launches each catalog instance type of a family in the
    start-up table (:data:`fleetshare.inference.startup.NODE_READY`) in the table's time,
    unless ``cloud.launch_latency_by_type`` names the type already."""
    cloud = scenario.spec.cloud
    latency = dict(cloud.launch_latency_by_type)
    for instance in scenario.catalog:
        figure = node_ready(instance.family)
        if figure is not None:
            latency.setdefault(instance.name, figure.seconds)
    spec = scenario.spec.model_copy(
        update={"cloud": cloud.model_copy(update={"launch_latency_by_type": latency})}
    )
    return replace(scenario, spec=spec)


def run_services(scenario: Scenario, services: list[Service], option: str) -> ServiceRun:
    """Run ``scenario`` with ``services`` reduced to one capacity ``option`` (see
    :meth:`Service.only`) until their traffic ends."""
    chosen = [s.only(option) for s in services]
    if any(s.node_ready_from_table for s in services):
        scenario = with_node_ready_table(scenario)
    runner = ServiceRunner(scenario, chosen)
    result = runner.run()
    end = runner.end if scenario.until is None else min(runner.end, scenario.until)
    runner.finish(end)
    return ServiceRun(result, runner.services, end, option)
