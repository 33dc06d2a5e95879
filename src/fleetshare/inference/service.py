"""A service ready to simulate: its spec resolved (policy, traffic, pod) and the readings its
scaler takes at one moment (pure)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from fleetshare.autoscaling import cron
from fleetshare.inference.forecast import Forecaster
from fleetshare.inference.gauges import GAUGES
from fleetshare.inference.request_trace import Requests
from fleetshare.inference.scaler import Reading
from fleetshare.inference.spec import (
    FloorSpec,
    ForecastSpec,
    HeadroomSpec,
    ObservedRateSpec,
    ScalerSpec,
    ServingSpec,
    SloSpec,
    StartupSpec,
)
from fleetshare.inference.traffic import Traffic, observed_rate
from fleetshare.model.workload import PodSet

SERVICE_LABEL = "fleetshare.io/service"
ROLE_LABEL = "fleetshare.io/service-role"


@dataclass(frozen=True)
class Service:
    """One model server in a run."""

    name: str
    team: str
    priority: int
    priority_class: str | None
    pod: PodSet
    scaler: ScalerSpec
    capacity_rps: float
    request_seconds: float
    startup: StartupSpec
    traffic: Traffic
    headroom: HeadroomSpec | None = None
    placeholder_priority: int = 0
    floors: tuple[FloorSpec, ...] = ()
    forecast: ForecastSpec | None = None
    measure_from: float = 0.0
    notes: tuple[str, ...] = ()
    requests: Requests | None = None
    """The requests (from a trace file, or drawn from the traffic) when ``serving`` is set."""
    serving: ServingSpec | None = None
    slo: SloSpec | None = None
    observed: ObservedRateSpec | None = None
    node_ready_from_table: bool = False
    """Node launch to Ready per instance type from the start-up table (inference/startup.py)."""

    def seen_rate(self, now: float) -> float:
        """The request rate the scaler reads at ``now``: the true rate, or the windowed
        rate of scrapes (:func:`~fleetshare.inference.traffic.observed_rate`)."""
        o = self.observed
        if o is None:
            return self.traffic.at(now)
        return observed_rate(self.traffic, now, o.window_seconds, o.scrape_interval_seconds)

    def reads_engine(self) -> bool:
        """True when a trigger reads the serving engine's gauges (``queue`` or ``running``)
        and the service has a serving model to run during the simulation."""
        return self.serving is not None and any(t.metric in GAUGES for t in self.scaler.triggers)

    def gpus_per_replica(self) -> float:
        """GPUs one replica requests (whole GPUs; MIG slices are not counted)."""
        return self.pod.requests.get("nvidia.com/gpu", 0) / 1000

    def rps_target(self) -> float | None:
        """The per-replica target of the requests-per-second trigger, if there is one."""
        return next((t.target for t in self.scaler.triggers if t.metric == "rps"), None)

    def only(self, option: str) -> Service:
        """This service with one capacity option kept: ``reactive`` (none), ``headroom``,
        ``scheduled`` (the floors) or ``forecast``; ``all`` keeps every one."""
        keep = {option} if option != "all" else {"headroom", "scheduled", "forecast"}
        return replace(
            self,
            headroom=self.headroom if "headroom" in keep else None,
            floors=self.floors if "scheduled" in keep else (),
            forecast=self.forecast if "forecast" in keep else None,
        )

    def has(self, option: str) -> bool:
        """True when the service defines the option (``reactive`` always)."""
        return {
            "reactive": True,
            "headroom": self.headroom is not None,
            "scheduled": bool(self.floors),
            "forecast": self.forecast is not None,
            "all": True,
        }[option]

    def needed(self, rate: float) -> int:
        """Replicas the rate needs (the perfect-foresight curve), within ``max_replicas``."""
        return min(math.ceil(rate / self.capacity_rps - 1e-9), self.scaler.max_replicas)

    def placeholders_for(self, replicas: int) -> int:
        """Placeholder pods kept beside ``replicas`` wanted replicas."""
        h = self.headroom
        if h is None:
            return 0
        return h.pods + math.ceil(h.percent / 100 * replicas - 1e-9)

    def headroom_workloads(self, replicas: int) -> int:
        """Headroom workloads kept beside ``replicas`` wanted replicas: one per placeholder
        pod, or per training gang of ``gang_pods`` (the pods rounded up to whole gangs)."""
        return math.ceil(self.placeholders_for(replicas) / self.headroom_gang())

    def headroom_gang(self) -> int:
        """Pods per headroom workload (a training gang's; 1 for placeholders)."""
        return self.headroom.gang_pods if self.headroom is not None else 1

    def headroom_team(self) -> str:
        """The team whose workloads hold the headroom (training's own team, else the
        service's)."""
        h = self.headroom
        return h.team if h is not None and h.team is not None else self.team


def floor_readings(floors: Sequence[FloorSpec], now: float, clock_start: datetime) -> list[Reading]:
    """KEDA's cron triggers at ``now`` (seconds since ``clock_start``): each floor whose window
    is open reads ``min_replicas`` at a target of 1 (so the HPA proposes at least that), and
    is active while open."""
    return [
        Reading(float(f.min_replicas), 1.0, 0.0)
        for f in floors
        if cron.window_active(f.schedule, f.duration_seconds, now, clock_start, f.timezone)
    ]


def readings(
    service: Service,
    now: float,
    measured: Mapping[str, float],
    clock_start: datetime,
    forecaster: Forecaster | None,
    history: Sequence[tuple[float, float]],
    lead: float,
) -> list[Reading]:
    """The scaler's inputs at ``now``: each trigger's metric (``rps``: the rate it reads,
    :meth:`Service.seen_rate`; ``concurrency``: rps x request_seconds, Little's law;
    ``queue`` (requests waiting) and ``running`` (requests running): as ``measured``), each
    scheduled floor in its window as KEDA's cron trigger does (``min_replicas`` at a target
    of 1), and the forecast rate ``lead`` seconds ahead against the rps target."""
    rate = service.seen_rate(now)
    values = {"rps": rate, "concurrency": rate * service.request_seconds, **measured}
    out = [Reading(values[t.metric], t.target, t.activation) for t in service.scaler.triggers]
    out += floor_readings(service.floors, now, clock_start)
    target = service.rps_target()
    if forecaster is not None and target is not None:
        activation = next(t.activation for t in service.scaler.triggers if t.metric == "rps")
        out.append(Reading(forecaster.predict(history, now, lead), target, activation))
    return out
