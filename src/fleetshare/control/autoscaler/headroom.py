"""Room kept free ahead of demand: the configured headroom and each pool's warm capacity
(:mod:`fleetshare.autoscaling.warm`), launched for by provisioning and kept by emptiness and
consolidation."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from fleetshare.autoscaling.forecast import Forecaster
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner import POOL_LABEL, PodShape
from fleetshare.autoscaling.warm import WarmCapacity, rise, since, warm_pods, warm_target
from fleetshare.control.autoscaler.nodes import NodeBook
from fleetshare.control.autoscaler.room import first_fit, room_without
from fleetshare.control.autoscaler.step import Step
from fleetshare.governance.demand import Demand
from fleetshare.governance.snapshot import Running, Snapshot
from fleetshare.model.quantity import MILLI
from fleetshare.model.resources import parse_resources
from fleetshare.model.workload import PodSet
from fleetshare.placement.first_fit import Room

WarmRoom = tuple[dict[str, int], int, dict[str, str]]
"""Room to keep free: (requests of one pod in milli-units, pods, node selector)."""


@dataclass
class WarmPool:
    """A pool's warm capacity as it runs: its forecaster, its recent demand and rises."""

    setting: WarmCapacity
    forecaster: Forecaster
    latency: float = 0.0
    """The cloud's launch latency: a rise is how far demand climbs within it."""
    recent: deque[tuple[float, float]] = field(default_factory=deque)
    """(time, demand) change points of the last ``hold_seconds`` (and launch latency), and the
    one before."""
    rises: deque[tuple[float, float]] = field(default_factory=deque)
    """(time, rise) of the demand's climbs in the last ``burst_seconds``."""
    pods: int = 0
    """Warm pods kept at the latest step."""

    @classmethod
    def of(cls, setting: WarmCapacity, latency: float) -> WarmPool:
        """A pool's warm state, its forecaster seeded with the setting's ``history``."""
        warm = cls(setting, Forecaster(setting.spec()), latency)
        for at, value in setting.history:
            warm.observe(at, value)
        return warm

    def observe(self, at: float, value: float) -> None:
        """Demand is ``value`` from ``at`` on."""
        self.forecaster.observe(at, value)
        setting = self.setting
        if not self.recent or self.recent[-1][1] != value:
            if setting.burst_seconds:
                climb = rise(self.recent, at, value, self.latency)
                if climb > 0:
                    self.rises.append((at, climb))
            self.recent.append((at, value))
        start = at - max(setting.hold_seconds, self.latency if setting.burst_seconds else 0.0)
        while len(self.recent) > 1 and self.recent[1][0] <= start:
            self.recent.popleft()
        while self.rises and self.rises[0][0] < at - setting.burst_seconds:
            self.rises.popleft()

    def target(self, now: float, forecast: float) -> float:
        """The demand to be ready for (:func:`warm_target`) at ``now``."""
        setting = self.setting
        held = since(self.recent, now - setting.hold_seconds)
        burst = max((r for _, r in self.rises), default=0.0)
        return warm_target(forecast, (v for _, v in held), setting.margin, burst)


def _serves(pool: NodePool, selector: Mapping[str, str]) -> bool:
    """The pool's nodes would carry ``selector`` (as far as the pool's own labels and name
    tell: other keys, such as an instance type, are not judged here)."""
    labels = {**pool.labels, POOL_LABEL: pool.name}
    return all(labels.get(key, value) == value for key, value in selector.items())


class Headroom:
    """The configured headroom and the warm pools' room, and what keeping them needs."""

    def __init__(self, book: NodeBook, pools: Iterable[NodePool]) -> None:
        self.book = book
        self.setup = book.setup
        self.configured: list[WarmRoom] = [
            (parse_resources(room.requests), room.count, dict(room.node_selector))
            for room in self.setup.settings.headroom
        ]
        latency = self.setup.latency
        self.warm = {
            p.name: WarmPool.of(p.warm_capacity, latency) for p in pools if p.warm_capacity
        }
        """Pools with warm capacity, by name."""
        self.warm_rooms: list[WarmRoom] = []

    def rooms(self) -> list[WarmRoom]:
        """The room to keep free: the configured headroom and the pools' warm capacity."""
        return self.configured + self.warm_rooms

    def shapes(self, free: list[Room]) -> list[PodShape]:
        """Headroom pods that do not fit in ``free`` (taken as they fit): what to launch to
        keep the configured headroom and warm capacity."""
        out = []
        for requests, count, selector in self.rooms():
            podset = PodSet("headroom", count, requests, selector)
            missing = count - first_fit(podset, selector, count, free)
            if missing > 0:
                out.append(
                    PodShape(
                        requests=tuple(sorted(requests.items())),
                        count=missing,
                        node_selector=tuple(sorted(selector.items())),
                        headroom=True,
                    )
                )
        return out

    def kept_without(self, name: str, removing: set[str], running: Iterable[Running]) -> bool:
        """True when the headroom and warm capacity still fit once ``name`` (and
        ``removing``) are gone and the pods on them have moved into the room left."""
        if not self.rooms():
            return True
        return not self.shapes(room_without(self.book, removing | {name}, running))

    def keep_warm(
        self, now: float, snapshot: Snapshot, demand: Sequence[Demand], out: Step
    ) -> None:
        """Observe each warm pool's demand (:mod:`fleetshare.autoscaling.warm`: the resource
        of the pods on its nodes and of the admissible pending pods it would launch for, each
        pending pod counted for the first pool that serves it) and set the warm room to keep
        ahead of its forecast."""
        if not self.warm:
            return
        amount = self._demand(snapshot, demand)
        rooms: list[WarmRoom] = []
        for name, warm in self.warm.items():
            pods = self._observe(now, name, warm, amount[name] / MILLI, out)
            if pods:
                rooms.append((warm.setting.unit(), pods, {POOL_LABEL: name}))
            step = warm.setting.step_seconds
            out.wake_if_busy.append((math.floor(now / step) + 1) * step)
        self.warm_rooms = rooms

    def _demand(self, snapshot: Snapshot, demand: Sequence[Demand]) -> dict[str, int]:
        """Each warm pool's demand in milli-units of its resource."""
        amount = dict.fromkeys(self.warm, 0)
        for entry in snapshot.running:
            for podset, placement in zip(
                entry.workload.podsets, entry.assignment.placement, strict=True
            ):
                for node, count in placement:
                    managed = self.book.nodes.get(node)
                    if managed is not None and managed.pool in amount:
                        resource = self.warm[managed.pool].setting.resource
                        amount[managed.pool] += podset.requests.get(resource, 0) * count
        for item in demand:
            for podset, flavor in zip(item.workload.podsets, item.node_selectors, strict=True):
                selector = {**podset.node_selector, **flavor}
                for name in amount:
                    if _serves(self.setup.pools[name], selector):
                        resource = self.warm[name].setting.resource
                        amount[name] += podset.requests.get(resource, 0) * podset.count
                        break
        return amount

    @staticmethod
    def _observe(now: float, name: str, warm: WarmPool, value: float, out: Step) -> int:
        """Observe one warm pool's demand ``value``; the warm pods it keeps (logged when
        they change)."""
        setting = warm.setting
        warm.observe(now, value)
        forecast = warm.forecaster.forecast(now, setting.horizon(warm.latency))
        target = warm.target(now, forecast.upper)
        pods = warm_pods(target, value, setting.unit()[setting.resource] / MILLI)
        if pods != warm.pods:
            warm.pods = pods
            out.log.append(
                {
                    "event": "autoscaler",
                    "action": "warm",
                    "pool": name,
                    "demand": round(value, 3),
                    "forecast": round(forecast.upper, 3),
                    "method": forecast.method,
                    "target": round(target, 3),
                    "pods": pods,
                }
            )
        return pods
