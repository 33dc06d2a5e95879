"""Launching, on the decision's side: a planned launch becomes a typed
:class:`~fleetshare.autoscaling.cloud.LaunchRequest`, yielded to the effect layer
(:mod:`.cloud_calls`), and what comes back is recorded: managed nodes that join at their
``ready_at``, or a capacity shortage that starts a cooldown before stuck work is tried again."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import TypeAlias, TypeVar

from fleetshare.autoscaling.cloud import Instance, LaunchRequest
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner import Launch
from fleetshare.control.autoscaler.nodes import NodeBook
from fleetshare.control.autoscaler.step import Step

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Shortage:
    """The cloud had no capacity for an offering (EC2's InsufficientInstanceCapacity)."""

    instance_type: str
    zone: str
    capacity_type: str
    message: str


@dataclass(frozen=True, slots=True)
class Launched:
    """What came of one launch request: the instances (maybe fewer than asked), or why none."""

    instances: tuple[Instance, ...] = ()
    shortage: Shortage | None = None
    refused: str | None = None
    """An account limit's words: no shortage, so the offering stays available."""


Decision: TypeAlias = Generator[LaunchRequest, Launched, T]
"""A decision that may launch: it yields each request and is sent back what came of it
(:func:`~.cloud_calls.drive` runs it); ``T`` is what it returns."""


def request(launch: Launch, pool: NodePool) -> LaunchRequest:
    """The cloud request of a planned launch: the pool's labels and taints on every node."""
    return LaunchRequest(
        instance_type=launch.instance_type,
        zone=launch.zone,
        capacity_type=launch.capacity_type,  # type: ignore[arg-type]
        count=launch.count,
        pool=launch.pool,
        labels=dict(pool.labels),
        taints=tuple((t.key, t.value, t.effect) for t in pool.taints),
    )


class Launcher:
    """Launches planned nodes and records the outcome in the node book."""

    def __init__(self, book: NodeBook) -> None:
        self.book = book
        self.setup = book.setup
        self.retry_at: float | None = None
        """When offerings that ran short are offered again (the latest shortage's cooldown)."""
        self.waited_for_nodes: set[str] = set()
        """Workloads that nodes were launched for (for the time-to-capacity metric)."""

    def launch(
        self,
        now: float,
        launches: Sequence[Launch],
        reason: str,
        workloads: tuple[str, ...],
        out: Step,
    ) -> Decision[bool]:
        """Launch; True when some launch hit insufficient capacity."""
        failed = False
        for launch in launches:
            pool = self.setup.pools[launch.pool]
            launched = yield request(launch, pool)
            if not self._record(now, pool, launched, launch.count, reason, workloads, out):
                failed = True
        self.waited_for_nodes.update(workloads)
        return failed

    def _record(
        self,
        now: float,
        pool: NodePool,
        launched: Launched,
        count: int,
        reason: str,
        workloads: tuple[str, ...],
        out: Step,
    ) -> bool:
        """Record one launch's outcome; False when it fell short of ``count``."""
        if launched.shortage is not None:
            self._short(now, launched.shortage, out)
            return False
        if launched.refused is not None:  # the plan kept within the limits it knew
            out.log.append(
                {"event": "autoscaler", "action": "account-limit", "message": launched.refused}
            )
            return False
        for instance in launched.instances:
            managed = self.book.add(instance, pool, reason, workloads)
            out.joins.append((managed.ready_at, managed.node))
            out.log.append(
                {
                    "event": "launch",
                    "node": managed.name,
                    "pool": pool.name,
                    "instance_type": instance.instance_type,
                    "zone": instance.zone,
                    "capacity_type": instance.capacity_type,
                    "price_per_hour": round(instance.price_per_hour, 6),
                    "reason": reason,
                }
            )
        return len(launched.instances) >= count

    def _short(self, now: float, shortage: Shortage, out: Step) -> None:
        """The cloud ran short (it marked the offering unavailable): plan again after its
        cooldown."""
        self.retry_at = now + self.setup.cloud.traits.ice_cooldown_seconds
        out.wake.append(self.retry_at)
        out.log.append(
            {
                "event": "autoscaler",
                "action": "ice",
                "instance_type": shortage.instance_type,
                "zone": shortage.zone,
                "capacity_type": shortage.capacity_type,
                "message": shortage.message,
            }
        )
