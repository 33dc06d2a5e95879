"""Pool floors and ceilings: HyperPod instance-group minimums and maximums, the node limit,
and scheduled windows (:mod:`fleetshare.autoscaling.cron`); the floors launched, and empty
nodes above a ceiling removed."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime

from fleetshare.autoscaling.cron import next_change, window_active
from fleetshare.autoscaling.nodepool import NODES, NodePool
from fleetshare.autoscaling.provisioner import Launch
from fleetshare.control.autoscaler.launching import Decision, Launcher
from fleetshare.control.autoscaler.nodes import ManagedNode
from fleetshare.control.autoscaler.step import Step, removal
from fleetshare.governance.snapshot import Running
from fleetshare.model.catalog import Catalog, ec2_name


def bounds(pool: NodePool, now: float, start: datetime) -> tuple[int | None, int | None]:
    """The pool's (floor, ceiling) at ``now``: instance-group minimums and maximums, and
    the tightest active schedules (``start``: the wall-clock time of t = 0)."""
    floor: int | None = None
    ceiling: int | None = None
    if pool.instance_groups:
        floor = sum(g.min_count for g in pool.instance_groups) or None
        ceiling = sum(g.max_count for g in pool.instance_groups)
    nodes_limit = pool.limit_of("nodes")
    if nodes_limit is not None:
        ceiling = min(ceiling if ceiling is not None else math.inf, nodes_limit // 1000)  # type: ignore[assignment]
    for rule in pool.schedules:
        if not window_active(rule.schedule, rule.duration_seconds, now, start):
            continue
        if rule.min_nodes is not None:
            floor = max(floor or 0, rule.min_nodes)
        if rule.max_nodes is not None:
            ceiling = rule.max_nodes if ceiling is None else min(ceiling, rule.max_nodes)
    return floor, ceiling


def floors(pools: Mapping[str, NodePool], now: float, start: datetime) -> dict[str, int]:
    """Pool -> its floor at ``now``, for the pools that have one."""
    return {
        name: floor for name, pool in pools.items() if (floor := bounds(pool, now, start)[0] or 0)
    }


def open_pools(pools: Iterable[NodePool], now: float, start: datetime) -> list[NodePool]:
    """The pools as they stand now: a pool's node limit tightened to its current ceiling
    (instance-group maximums, schedules), so the planner keeps within it and says which
    limit keeps work from getting nodes."""
    out = []
    for pool in pools:
        ceiling = bounds(pool, now, start)[1]
        limit = pool.limit_of(NODES)
        if ceiling is not None and (limit is None or ceiling < limit // 1000):
            pool = pool.model_copy(update={"limits": {**pool.limits, NODES: ceiling}})
        out.append(pool)
    return out


def floor_type(pool: NodePool, now: float, start: datetime, catalog: Catalog) -> str | None:
    """The instance type a floor launches: an active schedule's, else the pool's cheapest."""
    for rule in pool.schedules:
        if rule.instance_type and window_active(rule.schedule, rule.duration_seconds, now, start):
            return ec2_name(rule.instance_type)
    allowed = [i for i in catalog if pool.allows(i) and i.price_per_hour is not None]
    return min(allowed, key=lambda i: i.price_per_hour or 0.0).name if allowed else None


class Bounds:
    """Keeps each pool between its floor and its ceiling."""

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher
        self.book = launcher.book
        self.setup = launcher.setup

    def keep(self, now: float, pods: Mapping[str, list[Running]], out: Step) -> Decision[None]:
        """Wake at each schedule change; launch each instance group's minimum and the
        scheduled floor; remove empty nodes above the ceiling (the dearest first)."""
        start = self.setup.settings.clock_start
        removing = out.removing()
        for pool in self.setup.pools.values():
            for rule in pool.schedules:
                change = next_change(rule.schedule, rule.duration_seconds, now, start)
                out.wake_if_busy.append(change)
            floor, ceiling = bounds(pool, now, start)
            members = [
                m for m in self.book.live() if m.pool == pool.name and m.name not in removing
            ]
            count = len(members)
            count += yield from self._group_minimums(now, pool, members, out)
            if floor is not None and count < floor:
                instance_type = floor_type(pool, now, start, self.setup.catalog)
                if instance_type is not None:
                    why = f"scheduled floor of {floor}"
                    yield from self._launch_floor(now, pool, instance_type, floor - count, why, out)
            if ceiling is not None and count > ceiling:
                self._above_ceiling(pool, count, ceiling, pods, removing, out)

    def _group_minimums(
        self, now: float, pool: NodePool, members: list[ManagedNode], out: Step
    ) -> Decision[int]:
        """Launch what each instance group lacks of its own minimum; how many were asked."""
        asked = 0
        for group in pool.instance_groups:
            instance_type = ec2_name(group.instance_type)
            have = sum(1 for m in members if m.instance.instance_type == instance_type)
            if have < group.min_count:
                why = f"instance group {group.name} minimum of {group.min_count}"
                count = group.min_count - have
                asked += yield from self._launch_floor(now, pool, instance_type, count, why, out)
        return asked

    def _above_ceiling(
        self,
        pool: NodePool,
        count: int,
        ceiling: int,
        pods: Mapping[str, list[Running]],
        removing: set[str],
        out: Step,
    ) -> None:
        """Remove up to ``count - ceiling`` empty nodes of the pool, the dearest first."""
        empty = sorted(
            (m for m in self.book.live() if m.pool == pool.name and not pods.get(m.name)),
            key=lambda m: -m.instance.price_per_hour,
        )
        for managed in empty[: count - ceiling]:
            if managed.name not in removing:
                why = f"above the pool's ceiling of {ceiling}"
                out.removals.append((managed.name, removal("ceiling", why)))
                removing.add(managed.name)

    def _launch_floor(
        self, now: float, pool: NodePool, instance_type: str, count: int, why: str, out: Step
    ) -> Decision[int]:
        """Launch ``count`` nodes of one type for a floor, at its cheapest offering the pool
        takes; how many were asked for (0 when none is offered)."""
        offers = [
            o
            for o in self.setup.cloud.offerings([instance_type], now)
            if o.available
            and o.capacity_type in pool.capacity_types
            and (not pool.zones or o.zone in pool.zones)
        ]
        if not offers:
            return 0
        best = min(offers, key=lambda o: (o.price_per_hour, o.zone))
        launch = Launch(
            pool.name, best.instance_type, best.zone, best.capacity_type, count, best.price_per_hour
        )
        yield from self.launcher.launch(now, [launch], why, (), out)
        return count
